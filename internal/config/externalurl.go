package config

import (
	"net"
	"strings"
)

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
	// LinkNone: no base is known; links are daemon-relative paths.
	LinkNone LinkSource = "none"
)

// LinkBase is the base URL runbook and alert links in pages start with.
type LinkBase struct {
	URL    string // no trailing slash; "" when Source is LinkNone
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
// Without it the base is http://HOST:PORT, PORT being the port the daemon
// listens on (bound: "listen" is the actual address, so ":0" resolves) and
// HOST, the first known of: the listen host when it is one specific
// address (the server answers nowhere else); the pod's IP (POD_IP, set by
// the downward API in the shipped manifests); the host name. When none is
// known the base is empty and links stay daemon-relative.
func (c Config) PageLinkBase(listen string, hostname func() (string, error)) LinkBase {
	if c.ExternalURL != "" {
		return LinkBase{URL: strings.TrimRight(c.ExternalURL, "/"), Source: LinkConfigured}
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil || port == "" || port == "0" {
		return LinkBase{Source: LinkNone}
	}
	base := func(h string, s LinkSource) LinkBase {
		return LinkBase{URL: "http://" + net.JoinHostPort(h, port), Source: s}
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
	return LinkBase{Source: LinkNone}
}
