package diagnose

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
)

// ParseTarget reads one command-line target:
//
//	http://host:30000             base URL: /metrics is appended
//	http://host:30000/metrics     full metrics URL, used as is
//	host:30000                    no scheme: http:// is assumed
//	name=http://host:30000        an explicit name
//
// Without a name, the target is named host:port. Every target is scraped
// as an engine; a gateway's exposition is recognised by its families.
func ParseTarget(arg string) (scrape.Target, error) {
	name, raw := "", strings.TrimSpace(arg)
	if i := strings.Index(raw, "="); i > 0 && !strings.Contains(raw[:i], "/") {
		name, raw = raw[:i], raw[i+1:]
	}
	if raw == "" {
		return scrape.Target{}, fmt.Errorf("target %q: empty URL", arg)
	}
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	metricsURL, err := config.MetricsURL(raw)
	if err != nil {
		return scrape.Target{}, err
	}
	if name == "" {
		u, _ := url.Parse(metricsURL) // MetricsURL parsed it already
		name = u.Host
	}
	return scrape.Target{Name: name, URL: metricsURL, Kind: scrape.KindEngine}, nil
}

// ParseTargets parses every argument and rejects duplicate names (two
// paths on one host:port need explicit names).
func ParseTargets(args []string) ([]scrape.Target, error) {
	if len(args) == 0 {
		return nil, errors.New("no target URL given")
	}
	var errs []error
	var out []scrape.Target
	seen := map[string]bool{}
	for _, a := range args {
		t, err := ParseTarget(a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[t.Name] {
			errs = append(errs, fmt.Errorf("target %q given twice; name them: name=URL", t.Name))
			continue
		}
		seen[t.Name] = true
		out = append(out, t)
	}
	return out, errors.Join(errs...)
}
