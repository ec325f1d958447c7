package silence

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkMutes is the per-alert cost the evaluation loop pays each
// round, against a store of 1000 active silences (the maximum), half of
// them regular expressions, none matching.
func BenchmarkMutes(b *testing.B) {
	s := New(DefaultOptions(), nil)
	for i := range 1000 {
		m := fmt.Sprintf(`replica="sim-%d"`, i+1)
		if i%2 == 0 {
			m = fmt.Sprintf(`class=~"preempt_%d.*"`, i)
		}
		if _, err := s.Add(Silence{Matchers: []string{m, `severity!="info"`}, EndsAt: t0.Add(time.Hour), CreatedBy: "bench"}, t0); err != nil {
			b.Fatal(err)
		}
	}
	lset := map[string]string{"replica": "sim-0", "model": "llama", "class": "preempt_storm", "severity": "critical"}
	for b.Loop() {
		if ids := s.Mutes(lset, t0.Add(time.Minute)); len(ids) != 0 {
			b.Fatal(ids)
		}
	}
}
