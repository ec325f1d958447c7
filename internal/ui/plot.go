package ui

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// geometry is a plot's size in SVG user units. The CSS scales a plot to
// its box's width, so the font size is set against the width: a large
// plot spans the page and its text reads at about the page's own size, a
// compact one shares a row with others.
type geometry struct {
	Width, Height, FontSize float64
	Large                   bool
}

var (
	compactPlot = geometry{Width: 600, Height: 220, FontSize: 13}
	largePlot   = geometry{Width: 960, Height: 340, FontSize: 14, Large: true}
)

const (
	plotRight   = 12
	sparkWidth  = 120
	sparkHeight = 28
	// yTicks and xTicks are about how many labelled values an axis has.
	yTicks = 4
	xTicks = 6
)

// lineHeight is the height of one row of text.
func (g geometry) lineHeight() float64 { return math.Round(g.FontSize * 1.35) }

// textWidth estimates how wide s is set in the plot's font (a
// proportional sans-serif averages under 0.6 em a character).
func (g geometry) textWidth(s string) float64 { return 0.6 * g.FontSize * float64(len([]rune(s))) }

// point is one value at one time; OK is false where the value is unknown
// (the line is broken there, not drawn through zero).
type point struct {
	At    time.Time
	Value float64
	OK    bool
}

// line is one drawn series.
type line struct {
	Name   string
	Class  string // CSS class: series, baseline, secondary (a second series)
	Points []point
}

// marker is a vertical line at a moment (onset, fire, resolve).
type marker struct {
	Name string
	At   time.Time
}

// plotSpec is what a plot shows, before layout.
type plotSpec struct {
	Title    string
	Unit     string
	From, To time.Time
	Lines    []line
	// Limit is the threshold, drawn when HasLimit: through LimitPoints
	// where the limit moved with a baseline, else as a level line.
	Limit       float64
	HasLimit    bool
	LimitPoints []point
	// Rule is the threshold as the page words it, for the legend.
	Rule    string
	Markers []marker
	Size    geometry
}

// svgPath is one laid-out path.
type svgPath struct {
	Class, Name, D string
}

// svgLine is one laid-out straight line with its label.
type svgLine struct {
	Class, Name    string
	X1, Y1, X2, Y2 string
	LabelX, LabelY string
	Anchor         string // the label's text-anchor class: "" (start) or "end"
}

// svgText is one laid-out label.
type svgText struct {
	Text, X, Y string
	Anchor     string // "", "middle" or "end"
}

// legendEntry is one line of the legend under a plot: a swatch drawn in
// the line's class and what the line is.
type legendEntry struct {
	Class, Text string
}

// tableRow is one row of the text fallback: a time and each line's value.
type tableRow struct {
	At     string
	Values []string
}

// renderedPlot is a plot laid out for the template: SVG coordinates and
// the table of the same numbers for readers that do not see the drawing.
type renderedPlot struct {
	Title, Unit, Label string
	Rule               string
	Width, Height      int
	Large              bool
	FontSize           string
	Paths              []svgPath
	Threshold          *svgPath
	Labels             []svgText // baseline and threshold labels
	Markers            []svgLine
	Grid               []svgLine // one per y tick, across the plot
	YTicks, XTicks     []svgText
	XAxis              svgText // the time axis's name
	AxisY              string  // the time axis's height
	PlotLeft           string
	PlotRight          string
	Legend             []legendEntry
	Columns            []string
	Rows               []tableRow
	Empty              bool
}

func coord(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// yRange is the vertical extent: every known value, the limit, and zero
// when all values are positive (so a line's height reads as magnitude).
func (s plotSpec) yRange() (lo, hi float64, ok bool) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, l := range s.Lines {
		for _, p := range l.Points {
			if p.OK {
				lo, hi, ok = math.Min(lo, p.Value), math.Max(hi, p.Value), true
			}
		}
	}
	if !ok {
		return 0, 0, false
	}
	if s.HasLimit {
		lo, hi = math.Min(lo, s.Limit), math.Max(hi, s.Limit)
		for _, p := range s.LimitPoints {
			if p.OK {
				lo, hi = math.Min(lo, p.Value), math.Max(hi, p.Value)
			}
		}
	}
	lo = math.Min(lo, 0)
	if hi == lo {
		hi = lo + 1
	}
	return lo, hi, true
}

// layout turns the spec into SVG geometry: the value ticks in the
// signal's unit on the left, time ticks below, the marks' labels in rows
// above the plot area so that none covers another or the data.
func (s plotSpec) layout() renderedPlot {
	g := s.Size
	if g.Width == 0 {
		g = compactPlot
	}
	lh := g.lineHeight()
	r := renderedPlot{Title: s.Title, Unit: s.Unit, Rule: s.Rule, Width: int(g.Width), Height: int(g.Height), Large: g.Large,
		FontSize: coord(g.FontSize)}
	lo, hi, ok := s.yRange()
	r.Empty = !ok
	yt := []float64{lo, hi}
	if t, tok := niceTicks(lo, hi, yTicks); tok {
		yt, lo, hi = t, t[0], t[len(t)-1]
	}
	left := 0.0
	for _, v := range yt {
		left = math.Max(left, g.textWidth(formatValue(v, s.Unit)))
	}
	left = math.Ceil(left + 10)
	right := g.Width - plotRight
	bottom := g.Height - 2*lh - 4 // tick labels, then the axis's name
	r.PlotLeft, r.PlotRight, r.AxisY = coord(left), coord(right), coord(bottom)

	span := s.To.Sub(s.From).Seconds()
	if span <= 0 {
		span = 1
	}
	x := func(t time.Time) float64 { return left + (right-left)*t.Sub(s.From).Seconds()/span }

	// Marks first: their label rows set where the plot area starts.
	var rowEnds []float64
	for _, m := range s.Markers {
		if m.At.IsZero() || m.At.Before(s.From) || m.At.After(s.To) {
			continue
		}
		mx := x(m.At)
		name := m.Name + " " + m.At.UTC().Format(s.clock())
		w := g.textWidth(name)
		x0, anchor, lx := mx+3, "", mx+3
		if x0+w > g.Width {
			x0, anchor, lx = mx-3-w, "end", mx-3
		}
		row := 0
		for row < len(rowEnds) && rowEnds[row] > x0-g.FontSize {
			row++
		}
		if row == len(rowEnds) {
			rowEnds = append(rowEnds, 0)
		}
		rowEnds[row] = x0 + w
		r.Markers = append(r.Markers, svgLine{Class: "marker", Name: name, X1: coord(mx), X2: coord(mx),
			LabelX: coord(lx), LabelY: coord(float64(row+1) * lh), Anchor: anchor})
	}
	top := float64(len(rowEnds))*lh + 8
	for i := range r.Markers {
		r.Markers[i].Y1, r.Markers[i].Y2 = coord(top-4), coord(bottom)
	}
	y := func(v float64) float64 { return top + (bottom-top)*(1-(v-lo)/(hi-lo)) }

	for _, v := range yt {
		if !ok {
			break
		}
		vy := coord(y(v))
		r.Grid = append(r.Grid, svgLine{Class: "grid", X1: coord(left), Y1: vy, X2: coord(right), Y2: vy})
		r.YTicks = append(r.YTicks, svgText{Text: formatValue(v, s.Unit), X: coord(left - 6), Y: coord(y(v) + g.FontSize/3), Anchor: "end"})
	}
	n := xTicks
	if s.clock() == datedClock {
		n /= 2 // dated labels are half again as wide
	}
	prevEnd := math.Inf(-1)
	for _, t := range timeTicks(s.From, s.To, n) {
		label := t.UTC().Format(s.clock())
		tx, w, anchor := x(t), g.textWidth(label), "middle"
		start := tx - w/2
		switch {
		case start < 0:
			anchor, start = "", tx
		case tx+w/2 > g.Width:
			anchor, start = "end", tx-w
		}
		// A label moved in from an edge can reach its neighbour's: it is
		// left out rather than written over it.
		if start < prevEnd+g.FontSize/2 {
			continue
		}
		prevEnd = start + w
		r.XTicks = append(r.XTicks, svgText{Text: label, X: coord(tx), Y: coord(bottom + lh), Anchor: anchor})
	}
	r.XAxis = svgText{Text: "time (UTC)", X: coord((left + right) / 2), Y: coord(bottom + 2*lh), Anchor: "middle"}

	for _, l := range s.Lines {
		r.Columns = append(r.Columns, l.Name)
		if d := pathData(l.Points, x, y); d != "" {
			r.Paths = append(r.Paths, svgPath{Class: l.Class, Name: l.Name, D: d})
		}
		if l.Class == "baseline" && ok {
			if first, found := firstKnown(l.Points); found {
				// A baseline known only near the right edge (frozen when
				// the incident was renamed) is labelled leftwards from
				// the edge, not cut off by it.
				text := "baseline " + formatValue(first.Value, s.Unit)
				bx, anchor := x(first.At)+4, ""
				if bx+g.textWidth(text) > g.Width {
					bx, anchor = right-4, "end"
				}
				r.Labels = append(r.Labels, svgText{Text: text, X: coord(bx), Y: coord(y(first.Value) - 4), Anchor: anchor})
			}
		}
	}
	first := s.Title
	if len(s.Lines) > 0 && s.Lines[0].Name != "" {
		first = s.Lines[0].Name
	}
	r.Legend = append(r.Legend, legendEntry{Class: "series", Text: first})
	for _, l := range s.Lines[min(1, len(s.Lines)):] {
		r.Legend = append(r.Legend, legendEntry{Class: l.Class, Text: l.Name})
	}
	if s.HasLimit && ok {
		d := pathData(s.LimitPoints, x, y)
		if d == "" {
			ly := coord(y(s.Limit))
			d = "M" + coord(left) + " " + ly + " L" + coord(right) + " " + ly
		}
		name := "threshold " + formatValue(s.Limit, s.Unit)
		r.Threshold = &svgPath{Class: "threshold", Name: name, D: d}
		r.Labels = append(r.Labels, svgText{Text: name, X: coord(right - 4), Y: coord(y(s.Limit) - 4), Anchor: "end"})
		r.Legend = append(r.Legend, legendEntry{Class: "threshold", Text: "threshold (the rule's number)"})
	}
	r.Columns, r.Rows = s.table()
	r.Label = s.label(lo, hi, ok)
	return r
}

// firstKnown is the first point with a value.
func firstKnown(ps []point) (point, bool) {
	for _, p := range ps {
		if p.OK {
			return p, true
		}
	}
	return point{}, false
}

// niceTicks are round values covering lo..hi in about n steps: the step
// is 1, 2, 2.5 or 5 times a power of ten, the first tick at or below lo
// and the last at or above hi. Of the steps that give 3 to n+2 intervals
// it takes the one whose ticks waste the least height, the fewer ticks on
// a tie. ok is false for a range that cannot be divided (empty, or too
// wide for a float).
func niceTicks(lo, hi float64, n int) ([]float64, bool) {
	span := hi - lo
	if !(span > 0) || math.IsInf(span, 0) {
		return nil, false
	}
	mag := math.Pow(10, math.Floor(math.Log10(span/float64(n))))
	var best []float64
	bestCover := 0.0
	for _, k := range []float64{0.1, 1, 10} {
		for _, m := range []float64{1, 2, 2.5, 5} {
			step := m * k * mag
			if !(step > 0) || math.IsInf(step, 0) {
				continue
			}
			first, last := math.Floor(lo/step+1e-9), math.Ceil(hi/step-1e-9)
			intervals := int(last - first)
			if intervals < 3 || intervals > n+2 {
				continue
			}
			cover := span / ((last - first) * step)
			tie := math.Abs(cover-bestCover) < 1e-9
			if cover < bestCover && !tie || tie && intervals >= len(best)-1 {
				continue
			}
			ticks := make([]float64, 0, intervals+1)
			for i := range intervals + 1 {
				v := (first + float64(i)) * step
				if math.Abs(v) < step*1e-9 {
					v = 0 // not -1e-17 from rounding
				}
				ticks = append(ticks, v)
			}
			best, bestCover = ticks, cover
		}
	}
	return best, best != nil
}

// timeSteps are the spacings a time axis's ticks may have.
var timeSteps = []time.Duration{
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

// timeTicks are the round times within from..to, at most n of them: the
// smallest step of timeSteps that needs no more (whole days beyond).
func timeTicks(from, to time.Time, n int) []time.Time {
	span := to.Sub(from)
	if span <= 0 {
		return []time.Time{from}
	}
	step := timeSteps[len(timeSteps)-1]
	for _, s := range timeSteps {
		if span/s <= time.Duration(n) {
			step = s
			break
		}
	}
	if span/step > time.Duration(n) {
		step = (span/time.Duration(n)/(24*time.Hour) + 1) * 24 * time.Hour
	}
	var ticks []time.Time
	for t := from.Truncate(step); !t.After(to) && len(ticks) <= n+1; t = t.Add(step) {
		if !t.Before(from) {
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// clock is the layout of the plot's times: the time of day, with the
// date when the plot spans more than a day (an SLO rule's trend), so
// that a time is not read on the wrong day.
func (s plotSpec) clock() string {
	if s.To.Sub(s.From) > 24*time.Hour {
		return datedClock
	}
	return "15:04:05"
}

const datedClock = "Jan 2 15:04"

// label is the SVG's accessible name: what it plots and its range.
func (s plotSpec) label(lo, hi float64, ok bool) string {
	names := make([]string, 0, len(s.Lines))
	for _, l := range s.Lines {
		names = append(names, l.Name)
	}
	b := fmt.Sprintf("%s: %s from %s to %s UTC", s.Title, strings.Join(names, ", "), s.From.UTC().Format(s.clock()), s.To.UTC().Format(s.clock()))
	if !ok {
		return b + ", no data"
	}
	b += fmt.Sprintf(", values between %s and %s", formatValue(lo, s.Unit), formatValue(hi, s.Unit))
	if s.HasLimit {
		b += ", threshold " + formatValue(s.Limit, s.Unit)
	}
	return b
}

// pathData is an SVG path through the known points; an unknown value
// starts a new sub-path, so a gap is drawn as a gap.
func pathData(ps []point, x func(time.Time) float64, y func(float64) float64) string {
	var b strings.Builder
	pen := false
	for _, p := range ps {
		if !p.OK {
			pen = false
			continue
		}
		cmd := "L"
		if !pen {
			cmd = "M"
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(cmd + coord(x(p.At)) + " " + coord(y(p.Value)))
		pen = true
	}
	return b.String()
}

// table lists the lines' values per time, the first line's times setting
// the rows, and the threshold of each round when it has one.
func (s plotSpec) table() ([]string, []tableRow) {
	if len(s.Lines) == 0 {
		return nil, nil
	}
	cols := make([]string, 0, len(s.Lines)+1)
	for _, l := range s.Lines {
		cols = append(cols, l.Name)
	}
	if s.HasLimit {
		cols = append(cols, "threshold")
	}
	cell := func(ps []point, i int) string {
		if i < len(ps) && ps[i].OK {
			return formatValue(ps[i].Value, s.Unit)
		}
		return "–"
	}
	var rows []tableRow
	for i, p := range s.Lines[0].Points {
		row := tableRow{At: p.At.UTC().Format(s.clock())}
		for _, l := range s.Lines {
			row.Values = append(row.Values, cell(l.Points, i))
		}
		if s.HasLimit {
			v := cell(s.LimitPoints, i)
			if v == "–" {
				v = formatValue(s.Limit, s.Unit)
			}
			row.Values = append(row.Values, v)
		}
		rows = append(rows, row)
	}
	return cols, rows
}

// sparkline is a replica's small trend line in the fleet table.
type sparkline struct {
	Label         string
	Width, Height int
	D             string
}

func newSparkline(title string, ps []point, from, to time.Time) sparkline {
	s := sparkline{Width: sparkWidth, Height: sparkHeight}
	lo, hi, ok := plotSpec{Lines: []line{{Points: ps}}}.yRange()
	if !ok {
		s.Label = title + ": no data"
		return s
	}
	span := to.Sub(from).Seconds()
	if span <= 0 {
		span = 1
	}
	x := func(t time.Time) float64 { return 1 + (sparkWidth-2)*t.Sub(from).Seconds()/span }
	y := func(v float64) float64 { return 2 + (sparkHeight-4)*(1-(v-lo)/(hi-lo)) }
	s.D = pathData(ps, x, y)
	last := ""
	for _, p := range ps {
		if p.OK {
			last = formatValue(p.Value, "")
		}
	}
	s.Label = fmt.Sprintf("%s, %s to %s UTC: between %s and %s, last %s", title,
		from.UTC().Format("15:04"), to.UTC().Format("15:04"), formatValue(lo, ""), formatValue(hi, ""), last)
	return s
}

// formatValue prints a number with its unit as the pages the watchdog
// sends print it (notify.FormatValue): a share ("ratio") in percent, every
// number to three significant digits, so the workspace and the page on
// call agree to the digit.
func formatValue(v float64, unit string) string { return notify.FormatValue(v, unit) }
