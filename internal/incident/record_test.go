package incident

import (
	"testing"
	"time"
)

func TestSignalConstantIsAValueThatNeverMoved(t *testing.T) {
	pts := func(vs ...float64) []Point {
		var ps []Point
		for i, v := range vs {
			// A baseline or limit that moves does not make the value move.
			ps = append(ps, Point{At: t0.Add(time.Duration(i) * time.Minute), Value: v, Baseline: float64(i), HasBaseline: true})
		}
		return ps
	}
	for _, c := range []struct {
		name   string
		points []Point
		want   bool
	}{
		{"KV page size", pts(16, 16, 16), true},
		{"one round", pts(0.4), true},
		{"no value", nil, true},
		{"retractions/s", pts(0, 0, 2.5, 0), false},
		{"hit rate", pts(0.61, 0.05, 0.05), false},
	} {
		if got := (Signal{Name: c.name, Points: c.points}).Constant(); got != c.want {
			t.Errorf("%s %v: Constant() = %v, want %v", c.name, c.points, got, c.want)
		}
	}
}
