package window

import (
	"slices"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// answers are increases and quantiles a View computed, kept for the
// questions a round asks twice. Detectors and the triage ask some of the
// same ones: decode_slowdown's look-back scan asks for the inter-token
// count over each step's range, then again for the step's mean, and the
// triage and the snapshot ask for the same short-range quantiles, each of
// which reads every bucket. The answers are exact: a View's windows do not
// change while it is open.
//
// An increase is looked for among the latest few only: a round asks about
// two hundred, most of them once, and the look-back's repeat, thirty a
// round, comes right after the first (a dozen others, further apart, are
// computed again). A quantile is looked for among every quantile of the
// View, about twenty.
type answers struct {
	increases [8]answer // a ring; next is replaced next
	next      int
	quantiles []answer
	// matches hold the answers' copies of their matches: a caller may
	// reuse its slice for another question.
	matches []detect.Match
}

// answer is one question (a family, its matches, a quantile or 0 for an
// increase, the seqs [lo, hi)) and what it found.
type answer struct {
	set    bool
	name   string
	ms     []detect.Match
	q      float64
	lo, hi uint64
	val    float64
	span   time.Duration
	ok     bool
}

func (a *answer) is(name string, ms []detect.Match, q float64, lo, hi uint64) bool {
	return a.set && a.lo == lo && a.hi == hi && a.q == q && a.name == name && slices.Equal(a.ms, ms)
}

// question is an answer without its result, its matches copied.
func (as *answers) question(name string, ms []detect.Match, q float64, lo, hi uint64) answer {
	start := len(as.matches)
	as.matches = append(as.matches, ms...)
	return answer{set: true, name: name, ms: as.matches[start:len(as.matches):len(as.matches)], q: q, lo: lo, hi: hi}
}

func (as *answers) increase(name string, ms []detect.Match, lo, hi uint64) (answer, bool) {
	for i := range as.increases {
		if a := &as.increases[i]; a.is(name, ms, 0, lo, hi) {
			return *a, true
		}
	}
	return answer{}, false
}

func (as *answers) putIncrease(a answer) {
	as.increases[as.next] = a
	as.next = (as.next + 1) % len(as.increases)
}

func (as *answers) quantile(q float64, name string, ms []detect.Match, lo, hi uint64) (answer, bool) {
	for i := range as.quantiles {
		if a := &as.quantiles[i]; a.is(name, ms, q, lo, hi) {
			return *a, true
		}
	}
	return answer{}, false
}

func (as *answers) putQuantile(a answer) { as.quantiles = append(as.quantiles, a) }

// reset forgets the View's answers, keeping the memory.
func (as *answers) reset() {
	as.increases, as.next = [8]answer{}, 0
	clear(as.quantiles)
	as.quantiles = as.quantiles[:0]
	clear(as.matches)
	as.matches = as.matches[:0]
}
