package detect

import "time"

// ReferenceSource says where a Reference comes from.
type ReferenceSource string

// Reference sources.
const (
	// Frozen is the level a detector compared against when the incident it
	// found began: while the incident lasts, its baseline may not absorb it.
	Frozen ReferenceSource = "frozen"
	// Peers is the level of the replica's healthy peers (same model, same
	// version): for a replica with no healthy history of its own.
	Peers ReferenceSource = "peers"
)

// Reference is a baseline a detector is given instead of the one it would
// read from its window. Values are keyed by the names the detector itself
// reports in Finding.Baselines.
type Reference struct {
	Source ReferenceSource    `json:"source"`
	Since  time.Time          `json:"since,omitzero"`
	Values map[string]float64 `json:"values"`
}

// References are one replica's references, by detector class.
type References map[Class]Reference

// Referenced is an optional extension of Window: the references its
// replica's detectors compare against instead of the baselines they would
// read (an incident's frozen baseline, healthy peers' level). A Window
// without it, or without an entry for a class, gives none.
type Referenced interface {
	References() References
}

// ReferenceOf returns the reference w gives class c, if any.
func ReferenceOf(w Window, c Class) (Reference, bool) {
	rw, ok := w.(Referenced)
	if !ok {
		return Reference{}, false
	}
	r, ok := rw.References()[c]
	return r, ok && len(r.Values) > 0
}

// WithReferences returns w giving refs to its detectors. The result keeps
// every optional extension w has (ScrapeCounter, PointFinder), and no
// other, so detectors read it exactly as they read w.
func WithReferences(w Window, refs References) Window {
	if len(refs) == 0 {
		return w
	}
	base := referenced{Window: w, refs: refs}
	sc, isSC := w.(ScrapeCounter)
	pf, isPF := w.(PointFinder)
	switch {
	case isSC && isPF:
		return struct {
			referenced
			ScrapeCounter
			PointFinder
		}{base, sc, pf}
	case isSC:
		return struct {
			referenced
			ScrapeCounter
		}{base, sc}
	case isPF:
		return struct {
			referenced
			PointFinder
		}{base, pf}
	}
	return base
}

type referenced struct {
	Window
	refs References
}

func (r referenced) References() References { return r.refs }
