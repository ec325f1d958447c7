package discovery

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/tick"
)

// Resolver is the DNS seam; *net.Resolver implements it.
type Resolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
	LookupSRV(ctx context.Context, service, proto, name string) (cname string, addrs []*net.SRV, err error)
}

// dnsLookupTimeout bounds one lookup, so a hung resolver delays a refresh
// instead of stopping it.
const dnsLookupTimeout = 10 * time.Second

// dnsSource re-resolves the names of one dns entry every refresh interval.
// A failed lookup keeps that name's last known targets: a resolver hiccup,
// or a headless Service whose pods all went unready (NXDOMAIN), must not
// drop the fleet, or the outage would remove its own evidence.
type dnsSource struct {
	cfg      DNSConfig // defaulted
	resolver Resolver
	kick     func()
	known    *lastKnown // by name
}

func newDNSSource(cfg DNSConfig, resolver Resolver, failures prometheus.Counter, kick func(), logger *zap.Logger) *dnsSource {
	return &dnsSource{
		cfg:      cfg,
		resolver: resolver,
		kick:     kick,
		known: newLastKnown(failures, logger, "name",
			"DNS lookup failed; keeping the last known targets", "DNS lookup recovered"),
	}
}

// run resolves at once, reports synced, then refreshes until ctx is done.
func (s *dnsSource) run(ctx context.Context, synced func()) {
	s.refresh(ctx)
	synced()
	tick.Every(ctx, s.cfg.RefreshInterval, func(time.Time) { s.refresh(ctx) })
}

func (s *dnsSource) refresh(ctx context.Context) {
	changed := false
	for _, name := range s.cfg.Names {
		found, err := s.lookup(ctx, name)
		if ctx.Err() != nil {
			return // shutting down: neither a failure nor news
		}
		if err != nil {
			s.known.failed(name, err)
			continue
		}
		if s.known.set(name, found) {
			changed = true
		}
	}
	if changed {
		s.kick()
	}
}

// lookup resolves one name into its targets, sorted by name.
func (s *dnsSource) lookup(ctx context.Context, name string) ([]scrape.Target, error) {
	ctx, cancel := context.WithTimeout(ctx, dnsLookupTimeout)
	defer cancel()
	var out []scrape.Target
	if strings.HasPrefix(name, "_") {
		// Empty service and proto: the name is looked up as given.
		_, srvs, err := s.resolver.LookupSRV(ctx, "", "", name)
		if err != nil {
			return nil, err
		}
		for _, srv := range srvs {
			host := strings.TrimSuffix(srv.Target, ".")
			if host == "" || srv.Port == 0 {
				continue
			}
			port := strconv.Itoa(int(srv.Port))
			// The first label is the pod's hostname behind a headless
			// Service (sglang-0, or 10-1-2-3 for a Deployment's pod).
			short, _, _ := strings.Cut(host, ".")
			out = append(out, s.target(short+":"+port, net.JoinHostPort(host, port)))
		}
	} else {
		addrs, err := s.resolver.LookupIPAddr(ctx, strings.TrimSuffix(name, "."))
		if err != nil {
			return nil, err
		}
		port := strconv.Itoa(s.cfg.Port)
		for _, a := range addrs {
			hostPort := net.JoinHostPort(a.IP.String(), port)
			out = append(out, s.target(hostPort, hostPort))
		}
	}
	slices.SortFunc(out, func(a, b scrape.Target) int { return strings.Compare(a.Name, b.Name) })
	return slices.CompactFunc(out, func(a, b scrape.Target) bool { return a.Name == b.Name }), nil
}

func (s *dnsSource) target(name, hostPort string) scrape.Target {
	return scrape.Target{
		Name:   s.cfg.NamePrefix + name,
		URL:    s.cfg.Scheme + "://" + hostPort + s.cfg.Path,
		Kind:   s.cfg.Kind,
		Labels: s.cfg.Labels, // shared, read-only
		// Shared by the entry's targets, so they share one client.
		HTTPClient: s.cfg.HTTPClient,
	}
}

// targets returns the last known targets of every name, in config order.
func (s *dnsSource) targets() []scrape.Target {
	var out []scrape.Target
	for _, name := range s.cfg.Names {
		out = append(out, s.known.of(name)...)
	}
	return out
}
