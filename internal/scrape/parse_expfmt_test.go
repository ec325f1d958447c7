package scrape

import (
	"bytes"
	"math"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// expfmtParser is a second, independent Parser over prometheus/common/expfmt,
// built for tests only: the textparse path is compared with it (fixtures,
// replays, fuzzing), because two parsers written by different people must
// agree on every exposition SGLang serves.
type expfmtParser struct {
	text     expfmt.TextParser
	labels   []series.Label // arena the returned RawSample.Labels point into
	families []string       // scratch for a deterministic family order
	les      map[float64]string
}

// maxCachedBounds bounds the le/quantile string cache; bucket bounds are a
// small fixed set per target, so this only stops a pathological exposition
// from growing the cache forever.
const maxCachedBounds = 4096

func newExpfmtParser() *expfmtParser {
	return &expfmtParser{
		// The zero TextParser has an unset validation scheme and rejects
		// everything; UTF8 accepts both legacy and quoted names.
		text: expfmt.NewTextParser(model.UTF8Validation),
		les:  make(map[float64]string, 64),
	}
}

// Parse implements Parser.
func (p *expfmtParser) Parse(dst []RawSample, body []byte) ([]RawSample, error) {
	mfs, err := p.text.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return dst, err
	}

	// Size the label arena once so that slices handed out stay valid: a
	// reallocation in the middle would leave earlier samples pointing at
	// the old array (harmless, but it would defeat reuse).
	nSamples, nLabels := 0, 0
	p.families = p.families[:0]
	for name, mf := range mfs {
		p.families = append(p.families, name)
		for _, m := range mf.Metric {
			n := 1
			switch {
			case m.Histogram != nil:
				n = len(m.Histogram.Bucket) + 2
				nLabels += len(m.Histogram.Bucket) // the le label
			case m.Summary != nil:
				n = len(m.Summary.Quantile) + 2
				nLabels += len(m.Summary.Quantile) // the quantile label
			}
			nSamples += n
			nLabels += n * len(m.Label)
		}
	}
	// Map order is random; a sorted family order makes output (and any
	// test or log built from it) reproducible. ~100 names: cheap.
	slices.Sort(p.families)
	if cap(p.labels) < nLabels {
		p.labels = make([]series.Label, 0, nLabels)
	}
	p.labels = p.labels[:0]
	dst = slices.Grow(dst, nSamples)

	for _, name := range p.families {
		mf := mfs[name]
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			dst = p.appendHistograms(dst, name, mf.Metric)
		case dto.MetricType_SUMMARY:
			dst = p.appendSummaries(dst, name, mf.Metric)
		default:
			for _, m := range mf.Metric {
				dst = append(dst, RawSample{Name: name, Labels: p.copyLabels(m.Label), Value: simpleValue(m)})
			}
		}
	}
	return dst, nil
}

func simpleValue(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	default:
		return m.Untyped.GetValue()
	}
}

func (p *expfmtParser) appendHistograms(dst []RawSample, name string, ms []*dto.Metric) []RawSample {
	bucket, sum, count := name+"_bucket", name+"_sum", name+"_count"
	for _, m := range ms {
		h := m.Histogram
		if h == nil {
			continue
		}
		for _, b := range h.Bucket {
			v := b.GetCumulativeCountFloat()
			if b.CumulativeCount != nil {
				v = float64(b.GetCumulativeCount())
			}
			dst = append(dst, RawSample{Name: bucket, Labels: p.copyLabelsPlus(m.Label, model.BucketLabel, p.bound(b.GetUpperBound())), Value: v})
		}
		// Fragments of an exposition may lack _sum or _count; inventing a 0
		// would read as a counter reset downstream, so only emit what was
		// exposed.
		if h.SampleSum != nil {
			dst = append(dst, RawSample{Name: sum, Labels: p.copyLabels(m.Label), Value: h.GetSampleSum()})
		}
		if h.SampleCount != nil || h.SampleCountFloat != nil {
			v := h.GetSampleCountFloat()
			if h.SampleCount != nil {
				v = float64(h.GetSampleCount())
			}
			dst = append(dst, RawSample{Name: count, Labels: p.copyLabels(m.Label), Value: v})
		}
	}
	return dst
}

func (p *expfmtParser) appendSummaries(dst []RawSample, name string, ms []*dto.Metric) []RawSample {
	sum, count := name+"_sum", name+"_count"
	for _, m := range ms {
		s := m.Summary
		if s == nil {
			continue
		}
		for _, q := range s.Quantile {
			dst = append(dst, RawSample{Name: name, Labels: p.copyLabelsPlus(m.Label, model.QuantileLabel, p.bound(q.GetQuantile())), Value: q.GetValue()})
		}
		if s.SampleSum != nil {
			dst = append(dst, RawSample{Name: sum, Labels: p.copyLabels(m.Label), Value: s.GetSampleSum()})
		}
		if s.SampleCount != nil {
			dst = append(dst, RawSample{Name: count, Labels: p.copyLabels(m.Label), Value: float64(s.GetSampleCount())})
		}
	}
	return dst
}

func (p *expfmtParser) copyLabels(lps []*dto.LabelPair) []series.Label {
	start := len(p.labels)
	for _, lp := range lps {
		p.labels = append(p.labels, series.Label{Name: lp.GetName(), Value: lp.GetValue()})
	}
	return p.labels[start:len(p.labels):len(p.labels)]
}

func (p *expfmtParser) copyLabelsPlus(lps []*dto.LabelPair, name, value string) []series.Label {
	start := len(p.labels)
	for _, lp := range lps {
		p.labels = append(p.labels, series.Label{Name: lp.GetName(), Value: lp.GetValue()})
	}
	p.labels = append(p.labels, series.Label{Name: name, Value: value})
	return p.labels[start:len(p.labels):len(p.labels)]
}

// bound renders a bucket bound or quantile, cached because every scrape of a
// target repeats the same few dozen bounds.
func (p *expfmtParser) bound(f float64) string {
	if s, ok := p.les[f]; ok {
		return s
	}
	s := formatBound(f)
	if len(p.les) < maxCachedBounds && !math.IsNaN(f) {
		p.les[f] = s
	}
	return s
}
