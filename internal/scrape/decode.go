package scrape

import "github.com/sglang-watchdog/sglang-watchdog/pkg/series"

// Decoder turns exposition bytes into normalized groups without any HTTP:
// the part of a scrape after the fetch. It keeps its buffers between calls,
// so reuse one per goroutine; it is not safe for concurrent use.
type Decoder struct {
	parser Parser
	norm   *normalizer
	raw    []RawSample
}

// NewDecoder returns a Decoder using the default parser, keeping every
// family.
func NewDecoder() *Decoder { return NewKeepingDecoder(nil) }

// NewKeepingDecoder returns a Decoder that keeps only the given canonical
// families, as a scraper with Options.KeepFamilies does; nil keeps all.
func NewKeepingDecoder(families []string) *Decoder {
	return &Decoder{parser: newTextParser(newKeepSet(families).filter()), norm: newNormalizer()}
}

// Decode parses and normalizes body; maxSeries <= 0 means no limit.
func (d *Decoder) Decode(body []byte, maxSeries int) ([]series.Group, error) {
	return d.DecodeAs(KindEngine, body, maxSeries)
}

// DecodeAs is Decode of a target of the given kind: a gpu target's body
// is one group per GPU (normalizeGPU).
func (d *Decoder) DecodeAs(kind string, body []byte, maxSeries int) ([]series.Group, error) {
	var err error
	if d.raw, err = d.parser.Parse(d.raw[:0], body); err != nil {
		return nil, err
	}
	if kind == KindGPU {
		return normalizeGPU(d.raw, maxSeries, d.norm.aliases)
	}
	return d.norm.normalizeParsed(d.raw, maxSeries, d.parser)
}
