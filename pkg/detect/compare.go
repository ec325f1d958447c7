package detect

import (
	"math"
	"time"
)

// Baselines that cannot absorb an incident. A relative detector compares
// a recent range with the baseline just before it, so an incident that
// lasts becomes its own baseline. A finding therefore reports the levels
// it compared against (Finding.Baselines); the alert tracker freezes them
// when the incident begins and gives them back as a Frozen Reference while
// it lasts; and the detector compares with the frozen levels instead of
// its window's baseline, ready or not. Each detector states its clear rule
// while frozen: the finding persists until its signal is back near the
// frozen level, or an absolute floor says the replica is healthy.
//
// A replica without a ready baseline of its own (the watchdog or the
// replica just started) may be given a Peers Reference instead: the levels
// of its healthy peers over the same range, which internal/assess builds
// from PeerObserver.Levels. A finding made against it reports those levels,
// so its incident freezes them too.

// NoBaseline is the Baselines key (value 1) of a finding that its absolute
// floor alone decided, no baseline being known at its onset. Frozen, it
// keeps the incident judged by the floor alone: the replica's own history,
// which the incident fills, never becomes its baseline.
const NoBaseline = "no_baseline"

// PeerObserver is an optional extension of a Detector whose baseline a
// replica's healthy peers (same model, same engine type) can stand in for
// while the replica has none of its own.
type PeerObserver interface {
	Detector
	// NeedsPeers reports whether the replica's range at now could hold a
	// finding (enough traffic, past the detector's absolute floors) while
	// its own baseline holds too little to compare with: its peers'
	// levels may stand in. It asks the cheap questions first, so that a
	// round over replicas with ready baselines stays cheap.
	NeedsPeers(w Window, now time.Time) bool
	// Levels are the replica's levels over the detector's recent range,
	// by the names of its Finding.Baselines: what it offers its peers as
	// a reference. nil when the range holds too little to say.
	Levels(w Window, now time.Time) map[string]float64
}

// comparison is the reference a detector was given for its class this
// round, if any.
type comparison struct {
	ref Reference
}

func comparisonOf(w Window, c Class) comparison {
	r, _ := ReferenceOf(w, c)
	return comparison{ref: r}
}

// frozen reports whether the reference is an open incident's frozen
// baseline holding a level for one of keys: the detector's clear rule
// decides.
func (c comparison) frozen(keys ...string) bool { return c.ref.Source == Frozen && c.hasAny(keys) }

// peers reports whether the reference is the healthy peers' levels
// holding one of keys.
func (c comparison) peers(keys ...string) bool { return c.ref.Source == Peers && c.hasAny(keys) }

// floorOnly reports whether the frozen reference says no baseline was
// known at the incident's onset.
func (c comparison) floorOnly() bool {
	_, ok := c.ref.Values[NoBaseline]
	return c.ref.Source == Frozen && ok
}

func (c comparison) hasAny(keys []string) bool {
	for _, k := range keys {
		if _, ok := c.level(k); ok {
			return true
		}
	}
	return false
}

// level is the reference's finite level named key.
func (c comparison) level(key string) (float64, bool) {
	v, ok := c.ref.Values[key]
	return v, ok && finite(v)
}

// onto makes the reference's level named key m's baseline; without that
// level, m's baseline is unknown.
func (c comparison) onto(key string, ms ...*measure) {
	v, ok := c.level(key)
	for _, m := range ms {
		m.base, m.baseOK = v, ok
	}
}

// context gives m, a figure a page shows beside the rule's, the baseline
// the rule's figures compare with: while the incident's baselines are
// frozen, the one kept under key at its onset (none if none was), and it
// is kept under key for that; against the peers' levels, theirs under key
// (none if they offer none: a young replica's own baseline is the
// incident). Otherwise an hour into an incident a context baseline has
// absorbed it and reads as normal.
func (c comparison) context(kept levelSet, key string, m *measure) {
	if c.ref.Source == Frozen || c.ref.Source == Peers {
		c.onto(key, m)
	}
	kept.base(key, *m)
}

// levelSet collects levels by name: the baselines a finding compared
// against (Finding.Baselines), or the range levels a PeerObserver offers.
type levelSet map[string]float64

// base records m's baseline under key when it is known.
func (l levelSet) base(key string, m measure) { l.level(key, m.base, m.baseOK) }

// now records m's range value under key when it is known.
func (l levelSet) now(key string, m measure) { l.level(key, m.now, m.nowOK) }

// level records v under key when ok and finite (a level is persisted as
// JSON, which has no NaN).
func (l levelSet) level(key string, v float64, ok bool) {
	if ok && finite(v) {
		l[key] = v
	}
}

// orNil is l as a Finding or a PeerObserver hands it over: nil when empty.
func (l levelSet) orNil() map[string]float64 {
	if len(l) == 0 {
		return nil
	}
	return l
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
