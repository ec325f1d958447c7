package detect

import (
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// histSeries spells out the series of the families the detectors average
// as constants, so that a round's means build no name: each must be the
// family's own _sum and _count, as for any other family.
func TestHistSeriesAreTheFamilysOwn(t *testing.T) {
	spelled := []string{series.InterTokenLatency, series.TTFTSeconds, series.E2ERequestLatency,
		series.QueueTimeSeconds, series.GenerationTokensHist}
	for _, fam := range append(spelled, "other_histogram") {
		if sum, count := histSeries(fam); sum != fam+"_sum" || count != fam+"_count" {
			t.Errorf("histSeries(%q) = %q, %q", fam, sum, count)
		}
	}
	var sum, count string
	for _, fam := range spelled {
		if allocs := testing.AllocsPerRun(10, func() { sum, count = histSeries(fam) }); allocs != 0 {
			t.Errorf("histSeries(%q) allocates %.0f times, want none", fam, allocs)
		}
	}
	_, _ = sum, count
}
