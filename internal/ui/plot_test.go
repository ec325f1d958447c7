package ui

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestNiceTicksCoverTheRangeInRoundSteps(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   []float64
	}{
		{0, 0.9, []float64{0, 0.25, 0.5, 0.75, 1}},
		{0, 9, []float64{0, 2.5, 5, 7.5, 10}},
		{0, 5.86, []float64{0, 2, 4, 6}},
		{0.19, 0.193, []float64{0.19, 0.191, 0.192, 0.193}},
		{-3, 41, []float64{-10, 0, 10, 20, 30, 40, 50}},
		{0, 1, []float64{0, 0.25, 0.5, 0.75, 1}},
	} {
		got, ok := niceTicks(c.lo, c.hi, yTicks)
		if !ok || !slices.EqualFunc(got, c.want, func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }) {
			t.Errorf("niceTicks(%v, %v) = %v, %v; want %v", c.lo, c.hi, got, ok, c.want)
		}
	}
	for _, c := range [][2]float64{{0, 0}, {1, 0}, {-1e308, 1e308}, {0, math.Inf(1)}, {math.NaN(), 1}} {
		if got, ok := niceTicks(c[0], c[1], yTicks); ok {
			t.Errorf("niceTicks(%v, %v) = %v, want no ticks for a range that cannot be divided", c[0], c[1], got)
		}
	}
}

func TestTimeTicksAreRoundTimesWithinTheSpan(t *testing.T) {
	from := time.Date(2026, 5, 29, 12, 54, 14, 0, time.UTC)
	for _, c := range []struct {
		span  time.Duration
		first string
		step  time.Duration
	}{
		{9 * time.Minute, "12:56:00", 2 * time.Minute},
		{50 * time.Second, "12:54:20", 10 * time.Second},
		{5 * time.Hour, "13:00:00", time.Hour},
		{20 * 24 * time.Hour, "00:00:00", 4 * 24 * time.Hour},
	} {
		ticks := timeTicks(from, from.Add(c.span), xTicks)
		if len(ticks) == 0 || len(ticks) > xTicks+1 || ticks[0].Format("15:04:05") != c.first {
			t.Errorf("span %s: ticks %v, want at most %d from %s", c.span, ticks, xTicks+1, c.first)
			continue
		}
		for i, tk := range ticks {
			if tk.Before(from) || tk.After(from.Add(c.span)) || (i > 0 && tk.Sub(ticks[i-1]) != c.step) {
				t.Errorf("span %s: ticks %v, want every %s within the span", c.span, ticks, c.step)
				break
			}
		}
	}
	if got := timeTicks(from, from, xTicks); len(got) != 1 {
		t.Errorf("an empty span: ticks %v, want its one moment", got)
	}
}

// A plot over more than a day (an SLO rule's trend over 3 days) writes
// its times with the date, on the axis, in its accessible name and in its
// table: 12:00 on three days is three different times. A plot within a
// day keeps the time of day.
func TestPlotsOverDaysDateTheirTimes(t *testing.T) {
	to := time.Date(2026, 5, 29, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		span       time.Duration
		tick, last string
	}{
		{72 * time.Hour, "May 27 00:00", "May 29 12:00"},
		{time.Hour, "11:00:00", "12:00:00"},
	} {
		from := to.Add(-c.span)
		ps := []point{{At: from, Value: 1, OK: true}, {At: to, Value: 2, OK: true}}
		r := plotSpec{Title: "burn", Unit: "x", From: from, To: to, Lines: []line{{Name: "over 1d", Class: "series", Points: ps}}}.layout()
		if len(r.XTicks) == 0 || r.XTicks[0].Text != c.tick {
			t.Errorf("span %s: ticks %+v, want the first %q", c.span, r.XTicks, c.tick)
		}
		for i := 1; i < len(r.XTicks); i++ {
			gap := parseCoord(t, r.XTicks[i].X) - parseCoord(t, r.XTicks[i-1].X)
			if w := compactPlot.textWidth(r.XTicks[i].Text); gap < w {
				t.Errorf("span %s: ticks %q and %q are %.0f apart, narrower than a label (%.0f)", c.span, r.XTicks[i-1].Text, r.XTicks[i].Text, gap, w)
			}
		}
		if got := r.Rows[len(r.Rows)-1].At; got != c.last {
			t.Errorf("span %s: the table's last time %q, want %q", c.span, got, c.last)
		}
		if !strings.Contains(r.Label, "to "+c.last+" UTC") {
			t.Errorf("span %s: accessible name %q does not end at %q", c.span, r.Label, c.last)
		}
	}
}

// Marks close together (fired seconds after onset) get their labels on
// separate rows, so neither covers the other; the plot area starts below
// every row.
func TestMarkLabelsDoNotOverlap(t *testing.T) {
	from := time.Date(2026, 5, 29, 12, 0, 0, 0, time.UTC)
	to := from.Add(time.Hour)
	ps := []point{{At: from, Value: 1, OK: true}, {At: to, Value: 2, OK: true}}
	for _, g := range []geometry{compactPlot, largePlot} {
		p := plotSpec{Title: "queued", From: from, To: to, Lines: []line{{Name: "queued", Class: "series", Points: ps}}, Size: g,
			Markers: []marker{{"onset", from.Add(10 * time.Minute)}, {"fired", from.Add(10*time.Minute + 30*time.Second)}, {"resolved", to}}}.layout()
		if len(p.Markers) != 3 {
			t.Fatalf("%v: %d marks, want 3", g, len(p.Markers))
		}
		onset, fired := p.Markers[0], p.Markers[1]
		if onset.LabelY == fired.LabelY {
			t.Errorf("%v: onset and fired 30 s apart labelled on one row (y %s)", g, onset.LabelY)
		}
		top := math.Inf(1)
		for _, g := range p.Grid {
			y, _ := strconv.ParseFloat(g.Y1, 64)
			top = min(top, y)
		}
		for _, m := range p.Markers {
			y, _ := strconv.ParseFloat(m.LabelY, 64)
			if y >= top {
				t.Errorf("%v: %s labelled at y %v, inside the plot area starting at %v", g, m.Name, y, top)
			}
		}
		if last := p.Markers[2]; last.Anchor != "end" {
			t.Errorf("%v: the resolve mark at the right edge is labelled leftwards? anchor %q", g, last.Anchor)
		}
	}
}

// Time labels never overlap, also where one at an edge is moved in: the
// replica page's plot ending on a round time read "12:02:0012:02:10".
func TestTimeLabelsDoNotOverlap(t *testing.T) {
	to := time.Date(2026, 12, 7, 12, 2, 10, 0, time.UTC)
	for _, span := range []time.Duration{55 * time.Second, time.Minute, 50 * time.Second, 9 * time.Minute, time.Hour} {
		for _, g := range []geometry{compactPlot, largePlot} {
			ps := []point{{At: to.Add(-span), Value: 1, OK: true}, {At: to, Value: 2, OK: true}}
			p := plotSpec{Title: "queued", From: to.Add(-span), To: to, Size: g, Lines: []line{{Name: "queued", Class: "series", Points: ps}}}.layout()
			for i := 1; i < len(p.XTicks); i++ {
				_, end := extent(t, g, p.XTicks[i-1])
				if start, _ := extent(t, g, p.XTicks[i]); start < end {
					t.Errorf("%v, span %s: %q ends at x %.0f, after %q starts (%.0f)", g, span, p.XTicks[i-1].Text, end, p.XTicks[i].Text, start)
				}
			}
		}
	}
}

// extent is where a label's text runs, by its anchor.
func extent(t *testing.T, g geometry, l svgText) (float64, float64) {
	x, w := parseCoord(t, l.X), g.textWidth(l.Text)
	switch l.Anchor {
	case "end":
		return x - w, x
	case "middle":
		return x - w/2, x + w/2
	}
	return x, x + w
}

// A baseline first known near the right edge (the demo's storm, renamed
// from the prefix-cache collapse seconds before the plot ends) is
// labelled within the plot, leftwards from its edge: the label read
// "baseline 0/" cut off by it.
func TestBaselineLabelStaysWithinThePlot(t *testing.T) {
	from := time.Date(2026, 5, 29, 12, 0, 0, 0, time.UTC)
	to := from.Add(12 * time.Second)
	value := []point{{At: from, Value: 0.01, OK: true}, {At: to, Value: 0.05, OK: true}}
	for _, at := range []time.Time{from, to.Add(-time.Second)} {
		base := []point{{At: at, Value: 0, OK: true}, {At: to, Value: 0, OK: true}}
		for _, g := range []geometry{compactPlot, largePlot} {
			p := plotSpec{Title: "retracted requests/s", Unit: "/s", From: from, To: to, Size: g,
				Lines: []line{{Name: "retracted requests/s", Class: "series", Points: value}, {Name: "baseline", Class: "baseline", Points: base}}}.layout()
			i := slices.IndexFunc(p.Labels, func(l svgText) bool { return strings.HasPrefix(l.Text, "baseline ") })
			if i < 0 {
				t.Fatalf("%v: no baseline label in %+v", g, p.Labels)
			}
			l := p.Labels[i]
			if x0, x1 := extent(t, g, l); x0 < 0 || x1 > g.Width {
				t.Errorf("%v, baseline from %s: label %q spans x %.0f to %.0f, outside the plot's %.0f", g, at.Sub(from), l.Text, x0, x1, g.Width)
			}
		}
	}
}

func parseCoord(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("coordinate %q: %v", s, err)
	}
	return v
}
