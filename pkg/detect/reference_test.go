package detect

import (
	"testing"
	"time"
)

type plainWindow struct{ Window }

type countingWindow struct{ Window }

func (countingWindow) CountAbove(Selector, float64, time.Time, time.Time) (int, int) { return 1, 2 }
func (countingWindow) CountWhere(Selector, func(float64) bool, time.Time, time.Time) (int, int) {
	return 1, 2
}

type findingWindow struct{ Window }

func (findingWindow) Present(Selector, time.Time, time.Time) bool { return true }

type fullWindow struct{ Window }

func (fullWindow) CountAbove(Selector, float64, time.Time, time.Time) (int, int) { return 3, 4 }
func (fullWindow) CountWhere(Selector, func(float64) bool, time.Time, time.Time) (int, int) {
	return 3, 4
}
func (fullWindow) Present(Selector, time.Time, time.Time) bool { return true }

// A window given references keeps exactly the optional extensions it had,
// so a detector reads it as it reads the window alone, and gives each
// class its reference.
func TestWithReferencesKeepsTheWindowsExtensions(t *testing.T) {
	refs := References{CacheCollapse: {Source: Frozen, Values: map[string]float64{"hit_rate": 0.8}}}
	for _, tc := range []struct {
		name     string
		w        Window
		sc, pf   bool
		counting int
	}{
		{"plain", plainWindow{}, false, false, 0},
		{"counter", countingWindow{}, true, false, 1},
		{"finder", findingWindow{}, false, true, 0},
		{"both", fullWindow{}, true, true, 3},
	} {
		w := WithReferences(tc.w, refs)
		sc, isSC := w.(ScrapeCounter)
		_, isPF := w.(PointFinder)
		if isSC != tc.sc || isPF != tc.pf {
			t.Errorf("%s: ScrapeCounter %v, PointFinder %v; want %v, %v", tc.name, isSC, isPF, tc.sc, tc.pf)
		}
		if isSC {
			if n, _ := sc.CountAbove(Selector{}, 0, time.Time{}, time.Time{}); n != tc.counting {
				t.Errorf("%s: CountAbove not the window's own: %d", tc.name, n)
			}
		}
		if r, ok := ReferenceOf(w, CacheCollapse); !ok || r.Values["hit_rate"] != 0.8 {
			t.Errorf("%s: reference %+v, %v", tc.name, r, ok)
		}
		if _, ok := ReferenceOf(w, PreemptStorm); ok {
			t.Errorf("%s: a class without a reference got one", tc.name)
		}
		if _, ok := ReferenceOf(tc.w, CacheCollapse); ok {
			t.Errorf("%s: the bare window gave a reference", tc.name)
		}
	}
	if w := WithReferences(plainWindow{}, nil); w != (plainWindow{}) {
		t.Errorf("no references: want the window itself")
	}
}
