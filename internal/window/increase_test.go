package window

import (
	"testing"
	"time"
)

// A counter's increase read through chunk summaries (view.counterIncrease:
// whole chunks from their summary, continued without reading a chunk whose
// first value is at least the chunk before's last, thinned chunks read as
// runs) is the increase of stepping through every decoded value, its first
// and last seqs and count included, over every range: for counters that
// drop exactly where a chunk starts, in a restart of the replica and
// without one, at full resolution and thinned.
func TestCounterIncreaseFromSummariesMatchesStepping(t *testing.T) {
	opts := productionOptions()
	s := newTestStore(t, opts)
	const scrapes = 800
	for i := range scrapes {
		seq := uint64(i)
		restart := seq == 3*samplesPerChunk || seq == 5*samplesPerChunk+17
		base := func(per uint64) float64 {
			if seq >= 5*samplesPerChunk+17 {
				return float64((seq - 5*samplesPerChunk - 17) * per)
			}
			if seq >= 3*samplesPerChunk {
				return float64((seq - 3*samplesPerChunk) * per)
			}
			return float64(seq*per + 1000)
		}
		// Drops on its own at the start of chunks 2 and 4 (not a restart:
		// the other counters keep rising), with the others at restarts.
		own := base(7)
		if !restart && (seq >= 2*samplesPerChunk && seq < 3*samplesPerChunk || seq >= 4*samplesPerChunk && seq < 5*samplesPerChunk+17) {
			own = float64(seq % samplesPerChunk)
		}
		mustAppend(t, s, okScrape("r", t0.Add(time.Duration(i)*opts.ScrapeInterval),
			smp("c_total", own),
			smp("h_bucket", own, "le", "+Inf"), // thinned once 15 minutes old
			smp("a_total", base(3)), smp("b_total", base(5)), smp("d_total", base(11))))
	}
	r := s.replicas["r"]
	if len(r.restarts) != 2 {
		t.Fatalf("%d restarts recorded, want 2", len(r.restarts))
	}
	compared := 0
	for _, name := range []string{"c_total", "h_bucket"} {
		compared += compareIncreases(t, r, r.families[name][0], name == "h_bucket", scrapes)
	}
	// A chunk that drops, at a restart, and ends above where it was before
	// the drop, so that its summary's lastVal (the value before its first
	// drop) is below its last value; the next chunk starts, at another
	// restart, between the two: the run so far (its last value) is above
	// the next chunk's first, which is above the summary's lastVal.
	z := newTestStore(t, opts)
	for i := range scrapes {
		seq := uint64(i)
		var v float64
		switch { // chunk 3 is the seqs 360 to 479
		case seq < 420:
			v = float64(seq * 100)
		case seq < 4*samplesPerChunk:
			v = float64((seq - 420) * 2000) // 0 … 118,000, past 41,900
		default:
			v = float64(50_000 + (seq-4*samplesPerChunk)*100)
		}
		mustAppend(t, z, okScrape("r", t0.Add(time.Duration(i)*opts.ScrapeInterval), smp("z_total", v)))
	}
	zr := z.replicas["r"]
	if len(zr.restarts) != 2 {
		t.Fatalf("%d restarts recorded for z_total, want 2", len(zr.restarts))
	}
	compared += compareIncreases(t, zr, zr.families["z_total"][0], false, scrapes)
	t.Logf("%d ranges compared", compared)
}

// compareIncreases compares counterIncrease with stepping through every
// decoded value of rec over ranges of the seqs before end.
func compareIncreases(t *testing.T, r *replica, rec *seriesRec, wantThinned bool, end uint64) (compared int) {
	t.Helper()
	v := view{r: r, d: new(decoder)}
	ref := view{r: r, d: new(decoder)}
	thinned := false
	for _, c := range rec.pts.sealed {
		thinned = thinned || c.run.thinned()
	}
	if thinned != wantThinned {
		t.Fatalf("%s thinned: %v", rec.name, thinned)
	}
	for lo := r.times.first; lo < end; lo += 7 {
		for hi := lo + 1; hi <= end+1; hi += 13 {
			inc, f, l, n := v.counterIncrease(rec, lo, hi)
			vals := ref.d.values(&rec.pts, lo, hi)
			c := counterRuns{r: r}
			c.steps(vals, lo, lo, hi)
			wInc, wf, wl, wn := c.finish(), c.first, c.last, c.n
			if c.partial > 0 {
				wInc, wf, wl, wn = ref.counterIncreaseEstimated(rec, lo, hi)
			}
			if inc != wInc || f != wf || l != wl || n != wn {
				t.Fatalf("%s [%d, %d): increase %v over %d..%d (%d points), stepping gives %v over %d..%d (%d points)", rec.name, lo, hi, inc, f, l, n, wInc, wf, wl, wn)
			}
			compared++
		}
	}
	return compared
}
