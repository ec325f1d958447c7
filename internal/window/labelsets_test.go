package window

import (
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// Replicas exposing the same labels share one set: the replica that made
// it carries its cost, the others only their records, and reads see each
// replica's own values through it.
func TestReplicasShareLabelSets(t *testing.T) {
	s, err := New(Options{Retention: time.Hour}, prometheus.NewPedanticRegistry())
	if err != nil {
		t.Fatal(err)
	}
	running := func(v float64, model string) series.Sample {
		return smp(series.NumRunningReqs, v, "model_name", model, "tp_rank", "0")
	}
	mustAppend(t, s, okScrape("a", at(0), running(3, "llama")))
	mustAppend(t, s, okScrape("b", at(0), running(5, "llama")))
	mustAppend(t, s, okScrape("c", at(0), running(7, "qwen")))
	recOf := func(replica string) *seriesRec {
		r := s.replicas[replica]
		return r.families[series.NumRunningReqs][0]
	}
	a, b, c := recOf("a"), recOf("b"), recOf("c")
	if a.set != b.set {
		t.Error("replicas with the same labels hold different sets")
	}
	if a.set == c.set {
		t.Error("replicas with different labels share a set")
	}
	if !a.is(recMadeSet) || b.is(recMadeSet) || !c.is(recMadeSet) {
		t.Errorf("made the set: a %v, b %v, c %v; want a and c", a.is(recMadeSet), b.is(recMadeSet), c.is(recMadeSet))
	}
	if got, want := s.replicas["a"].bytes-s.replicas["b"].bytes, a.set.bytes(); got != want {
		t.Errorf("the replica that made the set holds %d bytes more than the one sharing it, want the set's %d", got, want)
	}
	for replica, want := range map[string]float64{"a": 3, "b": 5, "c": 7} {
		withView(t, s, replica, func(w detect.Window) {
			if got, ok := w.Last(detect.Sel(series.NumRunningReqs)); !ok || got != want {
				t.Errorf("%s: Last = %v, %v; want %v", replica, got, ok, want)
			}
		})
	}
	// The sample's labels are copied: a scraper reusing its buffer does
	// not rename the series.
	reused := series.Labels{{Name: "model_name", Value: "mixtral"}}
	set, _ := s.sets.get(reused)
	reused[0].Value = "changed"
	if set.labels[0].Value != "mixtral" {
		t.Errorf("set labels follow the caller's buffer: %v", set.labels)
	}
}

// Two label lists whose hashes meet still get their own labels: the later
// one an unshared set.
func TestLabelSetHashCollision(t *testing.T) {
	var sets labelSets
	first, _ := sets.get(series.Labels{{Name: "le", Value: "1"}})
	other := series.Labels{{Name: "le", Value: "2"}}
	// Plant first under other's hash, as a collision would.
	sets.sets[hashSeries(sets.seed, "", other)] = weak.Make(first)
	got, made := sets.get(other)
	if got == first || !made || !labelsEqual(got.labels, other) {
		t.Fatalf("colliding labels got %v (made %v), want a set of their own", got.labels, made)
	}
	if again, _ := sets.get(other); again == got {
		t.Error("the unshared set was stored over the colliding entry")
	}
	runtime.KeepAlive(first)
}

// A target churning label values leaves no sets behind: once no series
// holds a set and the collector has run, its entry is purged, and the
// table stays within twice the live sets.
func TestLabelSetsOfFreedSeriesArePurged(t *testing.T) {
	var sets labelSets
	live := make([]*labelSet, 0, 10)
	for i := range 10 {
		set, _ := sets.get(series.Labels{{Name: "id", Value: "kept-" + strconv.Itoa(i)}})
		live = append(live, set)
	}
	for round := range 5 {
		for i := range 1000 {
			sets.get(series.Labels{{Name: "request_id", Value: strconv.Itoa(round*1000 + i)}})
		}
		runtime.GC() // the churned sets are unreachable: their weak pointers clear
	}
	sets.get(series.Labels{{Name: "request_id", Value: "last"}}) // may purge
	if n := tableLen(&sets); n > 2*1000+minPurge {
		t.Errorf("table holds %d entries after churning 5000 sets with 10 live, want about twice the live ones at most", n)
	}
	sets.mu.Lock()
	sets.purge()
	sets.mu.Unlock()
	if n := tableLen(&sets); n != len(live) && n != len(live)+1 {
		t.Errorf("after a purge the table holds %d entries, want the %d live sets (and the last one made)", n, len(live))
	}
	for i, set := range live {
		got, made := sets.get(series.Labels{{Name: "id", Value: "kept-" + strconv.Itoa(i)}})
		if got != set || made {
			t.Errorf("live set %d was lost by the purge", i)
		}
	}
}

// Replicas making series at once share sets without a race (go test -race).
func TestLabelSetsConcurrentReplicas(t *testing.T) {
	s, err := New(Options{Retention: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for r := range 8 {
		wg.Go(func() {
			target := "r" + strconv.Itoa(r)
			for i := range 20 {
				var samples []series.Sample
				for k := range 50 {
					samples = append(samples, smp("sglang:x_total", float64(i), "k", strconv.Itoa(k)))
				}
				if err := s.Append(okScrape(target, at(float64(5*i)), samples...)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := tableLen(&s.sets); n != 50 {
		t.Errorf("table holds %d sets, want the 50 every replica shares", n)
	}
}

// tableLen is how many entries the table holds, freed sets not yet purged
// included.
func tableLen(t *labelSets) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sets)
}
