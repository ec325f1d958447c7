package detect_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// declaredSeverities maps each class to the severities its registry entry
// declares.
func declaredSeverities() map[detect.Class][]detect.Severity {
	out := map[detect.Class][]detect.Severity{}
	for _, e := range detect.Registry() {
		out[e.Class()] = e.Severities()
	}
	return out
}

// undeclaredSeverities describes the findings that carry a severity their
// detector does not declare: the runbooks describe the declared ones only.
func undeclaredSeverities(fs []detect.Finding) []string {
	declared := declaredSeverities()
	var out []string
	for _, f := range fs {
		if !slices.Contains(declared[f.Class], f.Severity) {
			out = append(out, fmt.Sprintf("%s finding is %s, but its registry entry declares %v", f.Class, f.Severity, declared[f.Class]))
		}
	}
	return out
}

// checkSeverityDeclared fails the test on an undeclared severity; every
// scenario run through detectWith passes here.
func checkSeverityDeclared(t *testing.T, fs []detect.Finding) {
	t.Helper()
	for _, problem := range undeclaredSeverities(fs) {
		t.Error(problem)
	}
}

func TestEveryDetectorDeclaresItsSeverities(t *testing.T) {
	for _, e := range detect.Registry() {
		sev := e.Severities()
		if len(sev) == 0 {
			t.Errorf("%s declares no severity", e.Class())
		}
		if !slices.IsSorted(sev) || len(slices.Compact(slices.Clone(sev))) != len(sev) {
			t.Errorf("%s: severities %v must be distinct, lowest first", e.Class(), sev)
		}
	}
}

func TestSeverityCheckCatchesAnUndeclaredSeverity(t *testing.T) {
	if got := undeclaredSeverities([]detect.Finding{{Class: detect.EngineHang, Severity: detect.Warning}}); len(got) != 1 {
		t.Errorf("a warning engine_hang finding (engine_hang declares only critical): %q", got)
	}
	if got := undeclaredSeverities([]detect.Finding{{Class: detect.EngineHang, Severity: detect.Critical}}); len(got) != 0 {
		t.Errorf("a critical engine_hang finding: %q", got)
	}
}
