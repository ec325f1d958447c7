package assess

import (
	"slices"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// Reads are the families an assessment with cfg reads from a window: the
// detectors' (enabled or not), the layer triage's, the window's restart accounting's
// and the snapshot's, sorted and without duplicates (canonical names, a
// histogram by its base name). The scraper keeps these and drops every
// other family at parse time.
func Reads(cfg detect.Config) []string {
	out := append(cfg.Reads(), snapshotReads()...)
	slices.Sort(out)
	return slices.Compact(out)
}
