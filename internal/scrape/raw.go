package scrape

import (
	"fmt"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// Normalizer turns raw samples that came from somewhere other than a
// scrape (a Prometheus-compatible query API, a recording) into exactly the
// series.Scrape the scraper would have produced from the same samples: the
// same canonical names, labels and groups. It keeps its scratch space
// between calls; not safe for concurrent use.
type Normalizer struct {
	norm      *normalizer
	maxSeries int
}

// NewNormalizer returns a Normalizer bounding each scrape to maxSeries
// normalized series (0: DefaultMaxSeries), as Options.MaxSeries does.
func NewNormalizer(maxSeries int) *Normalizer {
	if maxSeries <= 0 {
		maxSeries = DefaultMaxSeries
	}
	return &Normalizer{norm: newNormalizer(), maxSeries: maxSeries}
}

// Scrape normalizes the raw samples of target t taken at at. Too many
// series come back as a FailureTooManySeries scrape, as from the scraper.
// The result does not alias raw.
func (n *Normalizer) Scrape(t Target, at time.Time, raw []RawSample) series.Scrape {
	sc := series.Scrape{Target: t.Name, Kind: t.Kind, Labels: t.Labels, Address: t.address(), Pod: t.Pod, At: at}
	normalize := n.norm.normalize
	if t.Kind == KindGPU {
		normalize = func(raw []RawSample, maxSeries int) ([]series.Group, error) {
			return normalizeGPU(raw, maxSeries, n.norm.aliases)
		}
	}
	groups, err := normalize(raw, n.maxSeries)
	if err != nil {
		sc.Reason, sc.Status, sc.Error = series.FailureTooManySeries, 0, fmt.Sprintf("more than %d series after normalization", n.maxSeries)
		return sc
	}
	sc.Groups = groups
	return sc
}
