package config

import (
	"errors"
	"strings"
	"testing"
)

func TestPageLinkBase(t *testing.T) {
	host := func() (string, error) { return "watchdog-7d9f", nil }
	noHost := func() (string, error) { return "", errors.New("no host name") }
	for _, tc := range []struct {
		name, external, podIP, listen string
		hostname                      func() (string, error)
		want                          LinkBase
	}{
		{"configured wins", "https://watchdog.example.com/", "10.1.2.3", "127.0.0.1:9402", host,
			LinkBase{"https://watchdog.example.com", LinkConfigured}},
		{"specific listen host", "", "10.1.2.3", "127.0.0.1:41234", host,
			LinkBase{"http://127.0.0.1:41234", LinkListenHost}},
		{"listen host name", "", "", "watchdog.internal:9402", host,
			LinkBase{"http://watchdog.internal:9402", LinkListenHost}},
		{"pod IP on a wildcard listen", "", "10.1.2.3", "[::]:9402", host,
			LinkBase{"http://10.1.2.3:9402", LinkPodIP}},
		{"IPv6 pod IP", "", "fd00::17", "0.0.0.0:9402", host,
			LinkBase{"http://[fd00::17]:9402", LinkPodIP}},
		{"not an IP in POD_IP", "", "$(POD_IP)", "0.0.0.0:9402", host,
			LinkBase{"http://watchdog-7d9f:9402", LinkHostname}},
		{"host name", "", "", "[::]:9402", host,
			LinkBase{"http://watchdog-7d9f:9402", LinkHostname}},
		{"nothing known", "", "", "[::]:9402", noHost, LinkBase{"", LinkNone}},
		{"unbound port", "", "10.1.2.3", ":0", host, LinkBase{"", LinkNone}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.ExternalURL, c.PodIP = tc.external, tc.podIP
			got := c.PageLinkBase(tc.listen, tc.hostname)
			if got != tc.want {
				t.Errorf("PageLinkBase(%q) = %+v, want %+v", tc.listen, got, tc.want)
			}
			if w := got.Warning(); (w == "") != (tc.want.Source == LinkConfigured) || (w != "" && !strings.Contains(w, "external_url")) {
				t.Errorf("warning %q for source %s", w, got.Source)
			}
			if got.Derived() && got.Source != LinkNone && !strings.Contains(got.Warning(), got.URL) {
				t.Errorf("warning %q does not name the derived base %s", got.Warning(), got.URL)
			}
		})
	}
}

func TestPodIPFromEnvironment(t *testing.T) {
	cfg, err := Load(Default(), map[string]string{"WATCHDOG_TARGETS": "r0=http://127.0.0.1:30000", "POD_IP": "10.1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.PageLinkBase("[::]:9402", nil); got.URL != "http://10.1.2.3:9402" {
		t.Errorf("base %+v, want the pod IP", got)
	}
}

func TestPrefixes(t *testing.T) {
	for _, tc := range []struct {
		name, external, route string
		want                  Prefixes
	}{
		{"nothing set", "", "", Prefixes{"", ""}},
		{"external URL at the root", "https://watchdog.example.com/", "", Prefixes{"", ""}},
		{"external URL's path is the default route prefix", "https://ops.example.com/watchdog/", "", Prefixes{"/watchdog", "/watchdog"}},
		{"a deeper path", "https://ops.example.com/a/b", "", Prefixes{"/a/b", "/a/b"}},
		{"a proxy that strips the prefix", "https://ops.example.com/watchdog/", "/", Prefixes{"", "/watchdog"}},
		{"route prefix alone", "", "watchdog/", Prefixes{"/watchdog", "/watchdog"}},
		{"both differ", "https://ops.example.com/public/wd", "/internal", Prefixes{"/internal", "/public/wd"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.ExternalURL, c.RoutePrefix = tc.external, tc.route
			if got := c.Prefixes(); got != tc.want {
				t.Errorf("Prefixes() = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestPageLinkBaseUnderARoutePrefix: a derived base is where the daemon
// answers, so it carries the route prefix.
func TestPageLinkBaseUnderARoutePrefix(t *testing.T) {
	c := Default()
	c.RoutePrefix = "/watchdog/"
	if got := c.PageLinkBase("127.0.0.1:9402", nil); got != (LinkBase{"http://127.0.0.1:9402/watchdog", LinkListenHost}) {
		t.Errorf("derived base %+v", got)
	}
	if got := c.PageLinkBase(":0", nil); got != (LinkBase{"/watchdog", LinkNone}) {
		t.Errorf("no address known: %+v, want the prefix alone", got)
	}
	c.ExternalURL = "https://ops.example.com/wd/"
	if got := c.PageLinkBase("127.0.0.1:9402", nil); got != (LinkBase{"https://ops.example.com/wd", LinkConfigured}) {
		t.Errorf("configured base %+v: external_url is taken as given", got)
	}
}

func TestRoutePrefixValidated(t *testing.T) {
	for _, p := range []string{"http://x/y", "/a?b", "/a#b", "//host/a"} {
		c := Default()
		c.Targets = []Target{{Name: "a", URL: "http://a:1"}}
		c.RoutePrefix = p
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "route_prefix: ") {
			t.Errorf("route_prefix %q: %v, want rejected", p, err)
		}
	}
}
