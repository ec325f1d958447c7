package scrape

import (
	"fmt"
	"testing"
	"time"
)

// A fleet of 10,000 targets must not scrape in bursts: with start offsets
// spread evenly, no 1/100th of the interval holds more than twice its
// share of first scrapes (and so of every scrape after them), nor less than
// half of it.
func TestStartOffsetSpreadsTenThousandTargets(t *testing.T) {
	const targets, slots = 10_000, 100
	for _, naming := range []string{"replica-%d", "sim-%d", "sglang-%d.sglang.llm.svc:30000"} {
		for _, interval := range []time.Duration{time.Second, 5 * time.Second, 15 * time.Second} {
			var counts [slots]int
			for i := range targets {
				off := startOffset(fmt.Sprintf(naming, i), interval)
				if off < 0 || off >= interval {
					t.Fatalf("%s, interval %s: offset %s outside [0, interval)", fmt.Sprintf(naming, i), interval, off)
				}
				counts[int(off*slots/interval)]++
			}
			share := targets / slots
			for s, n := range counts {
				if n > 2*share || n < share/2 {
					t.Errorf("names %q, interval %s: slot %d/%d holds %d first scrapes, outside [%d, %d] (half to twice its share)",
						naming, interval, s, slots, n, share/2, 2*share)
				}
			}
		}
	}
}
