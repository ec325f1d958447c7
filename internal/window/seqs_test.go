package window

import (
	"testing"
	"time"
)

// A View turns a time into the seq of the first scrape after it from what
// the replica holds then: the answers one View remembers (decoder.seqs) do
// not outlive it, although its decoder is used again once retention has
// moved the window on.
func TestSeqOfATimeFollowsTheWindowAcrossViews(t *testing.T) {
	opts := Options{Retention: time.Minute, ScrapeInterval: 5 * time.Second}
	s := newTestStore(t, opts)
	for i := range 12 {
		mustAppend(t, s, okScrape("r", t0.Add(time.Duration(i)*opts.ScrapeInterval), smp("c_total", float64(i))))
	}
	r := s.replicas["r"]
	d := new(decoder)
	at := t0.Add(7 * time.Second).UnixNano() // between the scrapes 1 and 2
	if got := (view{r: r, d: d}).seqAfter(at); got != 2 {
		t.Fatalf("seq after 7 s = %d, want 2", got)
	}
	d.end()
	for i := 12; i < 30; i++ {
		mustAppend(t, s, okScrape("r", t0.Add(time.Duration(i)*opts.ScrapeInterval), smp("c_total", float64(i))))
	}
	if got, want := (view{r: r, d: d}).seqAfter(at), r.times.first; got != want || want <= 2 {
		t.Fatalf("after retention moved on, seq after 7 s = %d, want the oldest held, %d", got, want)
	}
}
