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
			if got.Derived() && got.URL != "" && !strings.Contains(got.Warning(), got.URL) {
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
