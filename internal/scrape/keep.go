package scrape

import "strings"

// keepFilter decides from an exposed sample name, before any label is
// built, whether the sample can reach a reader: its canonical family (after
// the gateway's "sglang_" re-rendering and the legacy aliases) or, for a
// histogram or summary part, the family without its _bucket/_sum/_count
// suffix is one of the kept families. Decisions are cached per exposed name;
// one filter belongs to one parser (not safe for concurrent use).
type keepFilter struct {
	families map[string]bool // canonical names, shared read-only
	aliases  map[string]string
	decided  map[string]bool
}

// keepSet is the read-only set of canonical families to keep, shared by
// every parser of a scrape manager.
type keepSet map[string]bool

// newKeepSet returns the set of families, or nil (keep everything) for nil.
func newKeepSet(families []string) keepSet {
	if families == nil {
		return nil
	}
	s := make(keepSet, len(families))
	for _, f := range families {
		s[f] = true
	}
	return s
}

// filter returns a fresh per-parser filter over the set; nil for a nil set.
func (s keepSet) filter() *keepFilter {
	if s == nil {
		return nil
	}
	return &keepFilter{families: s, aliases: legacyAliases(), decided: make(map[string]bool, 256)}
}

func (k *keepFilter) keeps(name []byte) bool {
	if v, ok := k.decided[string(name)]; ok {
		return v
	}
	v := k.decide(resolveName(string(name), k.aliases).canonical)
	if len(k.decided) >= maxCachedNames {
		clear(k.decided)
	}
	k.decided[string(name)] = v
	return v
}

func (k *keepFilter) decide(canonical string) bool {
	if k.families[canonical] {
		return true
	}
	for _, suf := range histogramSuffixes {
		if base, ok := strings.CutSuffix(canonical, suf); ok {
			return k.families[base]
		}
	}
	return false
}
