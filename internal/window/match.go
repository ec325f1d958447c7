package window

import (
	"hash/maphash"
	"strings"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// hashSeries hashes a series identity without allocating: the hot path keys
// ~700 samples per replica per scrape and only builds strings when a series
// is seen for the first time. Separator bytes that cannot occur in UTF-8
// text keep {a="bc"} and {ab="c"} apart. maphash is several times faster
// than a byte-wise FNV on the long label sets SGLang exposes.
func hashSeries(seed maphash.Seed, name string, labels series.Labels) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	h.WriteString(name)
	for _, l := range labels {
		h.WriteByte(0xff)
		h.WriteString(l.Name)
		h.WriteByte(0xfe)
		h.WriteString(l.Value)
	}
	return h.Sum64()
}

func labelsEqual(a, b series.Labels) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// matchesAll reports whether labels satisfy every match.
func matchesAll(labels series.Labels, ms []detect.Match) bool {
	for _, m := range ms {
		if !matchValue(labels.Get(m.Label), m) {
			return false
		}
	}
	return true
}

// matchValue applies one match to a label value ("" when the label is
// absent): any "|"-separated alternative may match, exactly or, with
// Prefix/Suffix, as a prefix/suffix of the value.
func matchValue(v string, m detect.Match) bool {
	alts := m.Value
	for {
		alt, rest, more := strings.Cut(alts, "|")
		var ok bool
		switch {
		case m.Prefix && m.Suffix:
			ok = strings.HasPrefix(v, alt) || strings.HasSuffix(v, alt)
		case m.Prefix:
			ok = strings.HasPrefix(v, alt)
		case m.Suffix:
			ok = strings.HasSuffix(v, alt)
		default:
			ok = v == alt
		}
		if ok {
			return true
		}
		if !more {
			return false
		}
		alts = rest
	}
}
