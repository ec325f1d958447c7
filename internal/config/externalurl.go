package config

import (
	"net"
	"net/url"
	"strings"
)

// Prefixes are the daemon's web paths, as Prometheus' --web.external-url
// and --web.route-prefix set them. Each is "" for the root, else "/path"
// with no trailing slash.
type Prefixes struct {
	// Routes is where the server mounts every endpoint, the probes and
	// /metrics included: route_prefix, else external_url's path.
	Routes string
	// Links is what the pages' own links, form actions and redirects start
	// with, the path a browser sees: external_url's path, else Routes.
	// It differs from Routes only behind a proxy that rewrites the path.
	Links string
}

// Prefixes resolves the web paths. An invalid external_url or
// route_prefix (Validate rejects both) counts as the root.
func (c Config) Prefixes() Prefixes {
	var external string
	if u, err := url.Parse(c.ExternalURL); err == nil && c.ExternalURL != "" {
		external = cleanPrefix(u.Path)
	}
	routes := external
	if c.RoutePrefix != "" && validPrefix(c.RoutePrefix) {
		routes = cleanPrefix(c.RoutePrefix)
	}
	links := routes
	if c.ExternalURL != "" {
		links = external
	}
	return Prefixes{Routes: routes, Links: links}
}

// cleanPrefix is p with one leading slash and none trailing; "" for "/".
func cleanPrefix(p string) string {
	p = strings.Trim(p, "/")
	if p == "" {
		return ""
	}
	return "/" + p
}

// validExternalURL reports whether u is an absolute http(s) URL, or empty.
func validExternalURL(u string) bool {
	if u == "" {
		return true
	}
	p, err := url.Parse(u)
	return err == nil && p.Host != "" && (p.Scheme == "http" || p.Scheme == "https")
}

// validPrefix reports whether p is a plain URL path (or empty): no scheme,
// host, query or fragment.
func validPrefix(p string) bool {
	if p == "" {
		return true
	}
	u, err := url.Parse(p)
	return err == nil && u.Scheme == "" && u.Host == "" && !u.ForceQuery && u.RawQuery == "" && u.Fragment == "" && !strings.Contains(p, "#") &&
		!strings.Contains(p, "//")
}

// LinkSource says where the base URL of page links came from.
type LinkSource string

// Link sources, most trusted first.
const (
	// LinkConfigured: external_url (WATCHDOG_EXTERNAL_URL) is set.
	LinkConfigured LinkSource = "external_url"
	// LinkListenHost: the daemon listens on one specific address.
	LinkListenHost LinkSource = "listen_address"
	// LinkPodIP: the pod's IP from the downward API (POD_IP).
	LinkPodIP LinkSource = "POD_IP"
	// LinkHostname: the machine's (or pod's) host name.
	LinkHostname LinkSource = "hostname"
	// LinkNone: no base is known; links are daemon-relative paths
	// (under the route prefix).
	LinkNone LinkSource = "none"
)

// LinkBase is the base URL runbook and alert links in pages start with.
type LinkBase struct {
	URL    string // no trailing slash; the route prefix ("" at the root) when Source is LinkNone
	Source LinkSource
}

// Derived reports whether the base was guessed rather than configured.
func (b LinkBase) Derived() bool { return b.Source != LinkConfigured }

// Warning is the start-up and /readyz notice for a paging integration
// sending links nobody configured: a derived address is often reachable
// only from inside the cluster or host. "" when external_url is set.
func (b LinkBase) Warning() string {
	switch b.Source {
	case LinkConfigured:
		return ""
	case LinkNone:
		return "external_url is not set and no address of this daemon is known: runbook and alert links in Slack and PagerDuty pages are bare paths; set external_url (WATCHDOG_EXTERNAL_URL) to the URL on-call can open"
	}
	return "external_url is not set: runbook and alert links in Slack and PagerDuty pages point to " + b.URL +
		" (derived from " + string(b.Source) + "), which on-call may not be able to open; set external_url (WATCHDOG_EXTERNAL_URL) to the URL on-call can open"
}

// PageLinkBase resolves the base URL of page links. external_url wins.
// Without it the base is http://HOST:PORT/PREFIX, PREFIX being the route
// prefix (the daemon answers nowhere else), PORT the port the daemon
// listens on (bound: "listen" is the actual address, so ":0" resolves) and
// HOST, the first known of: the listen host when it is one specific
// address (the server answers nowhere else); the pod's IP (POD_IP, set by
// the downward API in the shipped manifests); the host name. When none is
// known the base is the route prefix alone and links stay daemon-relative.
func (c Config) PageLinkBase(listen string, hostname func() (string, error)) LinkBase {
	if c.ExternalURL != "" {
		return LinkBase{URL: strings.TrimRight(c.ExternalURL, "/"), Source: LinkConfigured}
	}
	prefix := c.Prefixes().Routes
	none := LinkBase{URL: prefix, Source: LinkNone}
	host, port, err := net.SplitHostPort(listen)
	if err != nil || port == "" || port == "0" {
		return none
	}
	base := func(h string, s LinkSource) LinkBase {
		return LinkBase{URL: "http://" + net.JoinHostPort(h, port) + prefix, Source: s}
	}
	if ip := net.ParseIP(host); (ip != nil && !ip.IsUnspecified()) || (ip == nil && host != "") {
		return base(host, LinkListenHost)
	}
	if ip := net.ParseIP(c.PodIP); ip != nil && !ip.IsUnspecified() {
		return base(c.PodIP, LinkPodIP)
	}
	if hostname != nil {
		if h, err := hostname(); err == nil && h != "" {
			return base(h, LinkHostname)
		}
	}
	return none
}
