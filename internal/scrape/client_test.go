package scrape

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	commoncfg "github.com/prometheus/common/config"
	"go.yaml.in/yaml/v3"

	"github.com/sglang-watchdog/sglang-watchdog/internal/memnet"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

const exposition = "sglang:num_running_reqs 2\n"

// pki is a CA with a server certificate for 127.0.0.1 and a client
// certificate, written as PEM files.
type pki struct {
	pool                                  *x509.CertPool
	server                                tls.Certificate
	caFile, clientCertFile, clientKeyFile string
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, usage x509.ExtKeyUsage, ip net.IP) ([]byte, *ecdsa.PrivateKey) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: fmt.Sprint("leaf ", serial)},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{usage},
			KeyUsage: x509.KeyUsageDigitalSignature}
		if ip != nil {
			tmpl.IPAddresses = []net.IP{ip}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		b, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	srvDER, srvKey := issue(2, x509.ExtKeyUsageServerAuth, net.IPv4(127, 0, 0, 1))
	cliDER, cliKey := issue(3, x509.ExtKeyUsageClientAuth, nil)
	p := pki{pool: x509.NewCertPool(), server: tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}}
	p.pool.AddCert(ca)
	p.caFile = write("ca.pem", "CERTIFICATE", caDER)
	p.clientCertFile = write("client.pem", "CERTIFICATE", cliDER)
	p.clientKeyFile = write("client-key.pem", "EC PRIVATE KEY", keyDER(cliKey))
	return p
}

// sglangHandler answers /metrics and /health_generate as an engine does.
func sglangHandler() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			_, _ = w.Write([]byte(exposition))
		case "/health_generate":
			w.WriteHeader(http.StatusOK)
		default:
			http.NotFound(w, r)
		}
	}
}

// parseClient decodes a http_client block as the configuration does.
func parseClient(t *testing.T, doc string) *HTTPClientConfig {
	t.Helper()
	var c HTTPClientConfig
	if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return &c
}

// scrapeAndProbe runs a real scrape and a real health probe of tg through
// a Manager built with opts, as its loops would.
func scrapeAndProbe(t *testing.T, tg Target, opts Options) (series.Scrape, HealthProbe) {
	t.Helper()
	opts.HealthProbeInterval = DefaultHealthProbeInterval
	m, err := New([]Target{tg}, opts, newRecorder(t), prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.clients.close()
	sc := newScraper(m.fetch, m.opts).scrape(t.Context(), tg, nil)
	return sc, m.probe(t.Context(), tg)
}

// A replica behind mutual TLS: the CA verifies the server, the client
// certificate authenticates the watchdog, for scrapes and health probes
// alike; without the certificate the server refuses the handshake.
func TestScrapeOverMutualTLS(t *testing.T) {
	p := newPKI(t)
	srv := httptest.NewUnstartedServer(sglangHandler())
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{p.server}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: p.pool}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	tg := Target{Name: "r", URL: srv.URL + "/metrics", Kind: KindEngine}

	withCert := parseClient(t, fmt.Sprintf("tls_config: {ca_file: %s, cert_file: %s, key_file: %s}", p.caFile, p.clientCertFile, p.clientKeyFile))
	// At the scrape level, for every target.
	sc, probe := scrapeAndProbe(t, tg, Options{HTTPClient: withCert})
	if sc.Reason != "" || len(sc.Groups) != 1 {
		t.Fatalf("scrape over mTLS: %q %s", sc.Reason, sc.Error)
	}
	if !probe.Up {
		t.Errorf("health probe over mTLS: %+v", probe)
	}
	// The target's own settings win over the scrape level's.
	own := tg
	own.HTTPClient = withCert
	if sc, probe := scrapeAndProbe(t, own, Options{}); sc.Reason != "" || !probe.Up {
		t.Errorf("target's own mTLS settings: scrape %q %s, probe %+v", sc.Reason, sc.Error, probe)
	}

	caOnly := parseClient(t, "tls_config: {ca_file: "+p.caFile+"}")
	sc, probe = scrapeAndProbe(t, tg, Options{HTTPClient: caOnly})
	if sc.Reason == "" || probe.Up {
		t.Errorf("without a client certificate: scrape %q, probe up %v; want both refused", sc.Reason, probe.Up)
	}
	// Without the CA the server's certificate is not trusted.
	if sc := ScrapeOnce(t.Context(), nil, tg, Options{}); sc.Reason == "" || !strings.Contains(sc.Error, "certificate") {
		t.Errorf("without the CA: %q %s", sc.Reason, sc.Error)
	}
}

// An unreadable CA file fails the start with the target's name, and a
// target whose client cannot be built later fails its scrapes, not the
// others'.
func TestUnreadableCAFile(t *testing.T) {
	missing := parseClient(t, "tls_config: {ca_file: /nonexistent/ca.pem}")
	_, err := New([]Target{{Name: "r", URL: "https://h:1/metrics", Kind: KindEngine, HTTPClient: missing}}, Options{}, newRecorder(t), prometheus.NewRegistry(), nil)
	if err == nil || !strings.Contains(err.Error(), `target "r"`) || !strings.Contains(err.Error(), "/nonexistent/ca.pem") {
		t.Fatalf("New: %v, want the target and the file named", err)
	}
	_, err = New(nil, Options{HTTPClient: missing}, newRecorder(t), prometheus.NewRegistry(), nil)
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/ca.pem") {
		t.Fatalf("New with scrape-level settings: %v", err)
	}
	sc := ScrapeOnce(t.Context(), nil, Target{Name: "r", URL: "https://h:1/metrics", Kind: KindEngine, HTTPClient: missing}, Options{})
	if sc.Reason != series.FailureError || !strings.Contains(sc.Error, "CA") {
		t.Errorf("scrape: %q %s", sc.Reason, sc.Error)
	}
}

// Basic auth with the password in a file: 401 without it, a scrape with
// it; the password shows nowhere.
func TestScrapeWithBasicAuth(t *testing.T) {
	const password = "hunter2-basic"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, pw, ok := r.BasicAuth(); !ok || u != "watchdog" || pw != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="sglang"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		sglangHandler()(w, r)
	}))
	t.Cleanup(srv.Close)
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tg := Target{Name: "r", URL: srv.URL + "/metrics", Kind: KindEngine}

	sc, probe := scrapeAndProbe(t, tg, Options{})
	if sc.Reason != series.FailureHTTPStatus || sc.Status != http.StatusUnauthorized || probe.Status != http.StatusUnauthorized {
		t.Fatalf("without credentials: scrape %q %d, probe %d; want 401s", sc.Reason, sc.Status, probe.Status)
	}
	tg.HTTPClient = parseClient(t, "basic_auth: {username: watchdog, password_file: "+pwFile+"}")
	sc, probe = scrapeAndProbe(t, tg, Options{})
	if sc.Reason != "" || !probe.Up {
		t.Fatalf("with basic auth: scrape %q %s, probe %+v", sc.Reason, sc.Error, probe)
	}

	inline := parseClient(t, "basic_auth: {username: watchdog, password: "+password+"}")
	for _, out := range []string{fmt.Sprintf("%v %+v %#v %s", *inline, *inline, *inline, inline), yamlOf(t, inline), jsonOf(t, inline)} {
		if strings.Contains(out, password) {
			t.Fatalf("the settings print the password: %s", out)
		}
	}
	// A wrong password is a 401 whose message holds no credential.
	wrong := parseClient(t, "basic_auth: {username: watchdog, password: not-"+password+"}")
	tg.HTTPClient = wrong
	if sc := ScrapeOnce(t.Context(), nil, tg, Options{}); sc.Status != http.StatusUnauthorized || strings.Contains(sc.Error, password) {
		t.Errorf("wrong password: %d %q", sc.Status, sc.Error)
	}
}

func yamlOf(t *testing.T, v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func jsonOf(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A bearer token read from a file on every request: a rotated token is
// used from the next scrape on, without a restart.
func TestScrapeWithBearerTokenFile(t *testing.T) {
	token := "tok-1"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		sglangHandler()(w, r)
	}))
	t.Cleanup(srv.Close)
	file := filepath.Join(t.TempDir(), "token")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("tok-1")
	tg := Target{Name: "r", URL: srv.URL + "/metrics", Kind: KindEngine}
	m, err := New([]Target{tg}, Options{HTTPClient: parseClient(t, "bearer_token_file: "+file)}, newRecorder(t), prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.clients.close()
	s := newScraper(m.fetch, m.opts)
	if sc := s.scrape(t.Context(), tg, nil); sc.Reason != "" {
		t.Fatalf("with the token: %q %s", sc.Reason, sc.Error)
	}
	token = "tok-2" // the server rotated it
	if sc := s.scrape(t.Context(), tg, nil); sc.Status != http.StatusForbidden {
		t.Fatalf("old token: %q %d", sc.Reason, sc.Status)
	}
	write("tok-2")
	if sc := s.scrape(t.Context(), tg, nil); sc.Reason != "" {
		t.Fatalf("rotated token file: %q %s", sc.Reason, sc.Error)
	}
}

// The daemon's in-memory network (Options.Dial) carries the clients built
// from settings too, the scrape level's and a target's own.
func TestConfiguredClientsDialThroughOptionsDial(t *testing.T) {
	n := memnet.New()
	t.Cleanup(func() { n.Close() })
	l, err := n.Listen("tcp", "replica.invalid:30000")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Scope") != "llm" {
			http.Error(w, "no scope", http.StatusBadRequest)
			return
		}
		sglangHandler()(w, r)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	headers := parseClient(t, "http_headers: {X-Scope: {values: [llm]}}")
	tg := Target{Name: "r", URL: "http://replica.invalid:30000/metrics", Kind: KindEngine}
	for name, opts := range map[string]Options{
		"scrape level":    {HTTPClient: headers, Dial: n.DialContext},
		"target settings": {Dial: n.DialContext},
	} {
		t.Run(name, func(t *testing.T) {
			tg := tg
			if opts.HTTPClient == nil {
				tg.HTTPClient = headers
			}
			if sc, probe := scrapeAndProbe(t, tg, opts); sc.Reason != "" || !probe.Up {
				t.Errorf("scrape %q %s, probe %+v", sc.Reason, sc.Error, probe)
			}
		})
	}
}

// With follow_redirects off a redirect is a failure that says so.
func TestFollowRedirectsOff(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, "/metrics", http.StatusMovedPermanently)
			return
		}
		sglangHandler()(w, r)
	}))
	t.Cleanup(srv.Close)
	tg := Target{Name: "r", URL: srv.URL + "/moved", Kind: KindEngine, HTTPClient: parseClient(t, "follow_redirects: false")}
	sc := ScrapeOnce(t.Context(), nil, tg, Options{})
	if sc.Reason != series.FailureRedirect || !strings.Contains(sc.Error, "follow_redirects") {
		t.Errorf("%q %s", sc.Reason, sc.Error)
	}
	tg.HTTPClient = parseClient(t, "follow_redirects: true")
	if sc := ScrapeOnce(t.Context(), nil, tg, Options{}); sc.Reason != "" {
		t.Errorf("followed: %q %s", sc.Reason, sc.Error)
	}
}

// Targets with equal settings share one client, whatever their pointers;
// a setting no target has any more is forgotten.
func TestClientSetSharesEqualSettings(t *testing.T) {
	s, err := newClientSet(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	a, b := parseClient(t, "bearer_token: x"), parseClient(t, "bearer_token: x")
	other := parseClient(t, "bearer_token: y")
	ca, _ := s.get(a)
	cb, _ := s.get(b)
	co, _ := s.get(other)
	cd, _ := s.get(nil)
	if ca != cb || ca == co || cd == ca || cd != s.deflt {
		t.Errorf("a %p, b %p, other %p, default %p: want a and b shared, the others apart", ca, cb, co, cd)
	}
	s.keep([]Target{{Name: "b", HTTPClient: b}})
	if _, kept := s.byConfig[b]; !kept || len(s.byConfig) != 1 {
		t.Errorf("kept %d settings, want b's alone", len(s.byConfig))
	}
}

// A proxy_url given takes the place of the environment's proxy, the
// default, instead of contradicting it.
func TestProxyURLReplacesTheEnvironmentProxy(t *testing.T) {
	c := parseClient(t, "proxy_url: http://proxy.internal:3128")
	if r := c.resolved(); r.ProxyFromEnvironment || r.ProxyURL.String() != "http://proxy.internal:3128" {
		t.Errorf("resolved %+v", r.ProxyConfig)
	}
	if !DefaultHTTPClientConfig().ProxyFromEnvironment {
		t.Error("the default no longer takes the environment's proxy")
	}
	bad := HTTPClientConfig{commoncfg.HTTPClientConfig{BearerToken: "a", BearerTokenFile: "/f"}}
	if err := bad.Validate(); err == nil {
		t.Error("two credentials accepted")
	}
	cert := HTTPClientConfig{commoncfg.HTTPClientConfig{TLSConfig: commoncfg.TLSConfig{CertFile: "/c.pem"}}}
	if err := cert.Validate(); err == nil {
		t.Error("a client certificate without its key accepted")
	}
}
