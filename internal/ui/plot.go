package ui

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// Plot geometry in SVG user units; the CSS scales the SVG to the page's
// width, so one size serves phones and desktops.
const (
	plotWidth   = 600
	plotHeight  = 160
	plotLeft    = 56 // room for the y-axis labels
	plotRight   = 8
	plotTop     = 8
	plotBottom  = 24 // room for the time labels
	sparkWidth  = 120
	sparkHeight = 28
)

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
	Class  string // CSS class: series, baseline
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
	Markers     []marker
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
}

// thresholdPath is the laid-out threshold with its label.
type thresholdPath struct {
	Name, D        string
	LabelX, LabelY string
}

// tableRow is one row of the text fallback: a time and each line's value.
type tableRow struct {
	At     string
	Values []string
}

// renderedPlot is a plot laid out for the template: SVG coordinates and
// the table of the same numbers for readers that do not see the drawing.
type renderedPlot struct {
	Title, Unit, Label  string
	Width, Height       int
	Paths               []svgPath
	Threshold           *thresholdPath
	Markers             []svgLine
	YTop, YBottom       string // axis labels
	YTopAt, YBottomAt   string
	XStart, XEnd        string
	XRight, XLabelY     string
	Columns             []string
	Rows                []tableRow
	Empty               bool
	PlotLeft, PlotRight string
}

func coord(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// yRange is the vertical extent: every known value, the limit, and zero
// when all values are positive (so a bar's height reads as magnitude).
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

// layout turns the spec into SVG geometry.
func (s plotSpec) layout() renderedPlot {
	r := renderedPlot{Title: s.Title, Unit: s.Unit, Width: plotWidth, Height: plotHeight,
		XStart: s.From.UTC().Format("15:04:05"), XEnd: s.To.UTC().Format("15:04:05"),
		XRight: coord(plotWidth - plotRight), XLabelY: coord(plotHeight - 6),
		PlotLeft: coord(plotLeft), PlotRight: coord(plotWidth - plotRight)}
	lo, hi, ok := s.yRange()
	r.Empty = !ok
	span := s.To.Sub(s.From).Seconds()
	if span <= 0 {
		span = 1
	}
	x := func(t time.Time) float64 {
		return plotLeft + (plotWidth-plotLeft-plotRight)*t.Sub(s.From).Seconds()/span
	}
	y := func(v float64) float64 {
		return plotTop + (plotHeight-plotTop-plotBottom)*(1-(v-lo)/(hi-lo))
	}
	r.YTop, r.YBottom = formatValue(hi, s.Unit), formatValue(lo, s.Unit)
	r.YTopAt, r.YBottomAt = coord(plotTop+10), coord(plotHeight-plotBottom)
	for _, l := range s.Lines {
		r.Columns = append(r.Columns, l.Name)
		if d := pathData(l.Points, x, y); d != "" {
			r.Paths = append(r.Paths, svgPath{Class: l.Class, Name: l.Name, D: d})
		}
	}
	if s.HasLimit && ok {
		d := pathData(s.LimitPoints, x, y)
		labelAt := s.Limit
		if d == "" {
			ly := coord(y(s.Limit))
			d = "M" + coord(plotLeft) + " " + ly + " L" + coord(plotWidth-plotRight) + " " + ly
		}
		r.Threshold = &thresholdPath{Name: "threshold " + formatValue(labelAt, s.Unit), D: d,
			LabelX: coord(plotWidth - plotRight - 4), LabelY: coord(y(labelAt) - 3)}
	}
	for _, m := range s.Markers {
		if m.At.IsZero() || m.At.Before(s.From) || m.At.After(s.To) {
			continue
		}
		mx := coord(x(m.At))
		r.Markers = append(r.Markers, svgLine{Class: "marker", Name: m.Name + " " + m.At.UTC().Format("15:04:05"),
			X1: mx, Y1: coord(plotTop), X2: mx, Y2: coord(plotHeight - plotBottom), LabelX: mx, LabelY: coord(plotTop + 8)})
	}
	r.Rows = tableRows(s.Lines, s.Unit)
	r.Label = s.label(lo, hi, ok)
	return r
}

// label is the SVG's accessible name: what it plots and its range.
func (s plotSpec) label(lo, hi float64, ok bool) string {
	names := make([]string, 0, len(s.Lines))
	for _, l := range s.Lines {
		names = append(names, l.Name)
	}
	b := fmt.Sprintf("%s: %s from %s to %s UTC", s.Title, strings.Join(names, ", "), s.From.UTC().Format("15:04:05"), s.To.UTC().Format("15:04:05"))
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

// tableRows lists the lines' values per time, the first line's times
// setting the rows.
func tableRows(lines []line, unit string) []tableRow {
	if len(lines) == 0 {
		return nil
	}
	var rows []tableRow
	for i, p := range lines[0].Points {
		row := tableRow{At: p.At.UTC().Format("15:04:05")}
		for _, l := range lines {
			v := "–"
			if i < len(l.Points) && l.Points[i].OK {
				v = formatValue(l.Points[i].Value, unit)
			}
			row.Values = append(row.Values, v)
		}
		rows = append(rows, row)
	}
	return rows
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
