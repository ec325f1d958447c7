package promsource

import (
	"context"
	"fmt"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// Point is one value of a range query's series.
type Point struct {
	At    time.Time
	Value float64
}

// RangeSeries is one series of a range query's answer: its labels and
// points.
type RangeSeries struct {
	Labels map[string]string
	Points []Point
}

// Selector is the label matchers every query of this API carries
// (history.selector), without braces; "" for none.
func (r *Reader) Selector() string { return r.cfg.Selector }

// QueryRange runs an aggregating PromQL expression over [from, to] at
// step (the SLO memory's backfill: sums of increases by model), with
// the reader's timeout, bounds and metrics.
func (r *Reader) QueryRange(ctx context.Context, kind, q string, from, to time.Time, step time.Duration) ([]RangeSeries, error) {
	ans, err := r.query(ctx, kind, q, time.Time{}, v1.Range{Start: from, End: to, Step: step})
	if err != nil {
		return nil, err
	}
	m, ok := ans.value.(model.Matrix)
	if !ok {
		return nil, fmt.Errorf("%s query: unexpected result type %s", kind, ans.value.Type())
	}
	out := make([]RangeSeries, 0, len(m))
	for _, s := range m {
		rs := RangeSeries{Labels: make(map[string]string, len(s.Metric)), Points: make([]Point, 0, len(s.Values))}
		for k, v := range s.Metric {
			rs.Labels[string(k)] = string(v)
		}
		for _, p := range s.Values {
			rs.Points = append(rs.Points, Point{At: p.Timestamp.Time(), Value: float64(p.Value)})
		}
		out = append(out, rs)
	}
	return out, nil
}

// PromDuration writes d as PromQL does ("5m", "90s").
func PromDuration(d time.Duration) string { return promDuration(d) }
