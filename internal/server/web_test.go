package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"
)

// TestRoutePrefix: behind an Ingress path every endpoint, the probes and
// /metrics included, answers under the prefix and nowhere else; the root
// and the bare prefix lead to it.
func TestRoutePrefix(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "watchdog_up", Help: "h"}))
	base := serveWeb(t, Options{Gatherer: reg, Alerts: &fakeAlerts{ready: make(chan struct{})}, Now: time.Now,
		Web: Web{RoutePrefix: "/watchdog"}}, "http")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		path     string
		status   int
		want     string // in the body, or the Location of a redirect
		location bool
	}{
		{"/watchdog/-/healthy", 200, "ok", false},
		{"/watchdog/metrics", 200, "watchdog_up 0", false},
		{"/watchdog/api/v1/alerts", 200, `"status": "success"`, false},
		{"/watchdog/", 200, "/api/v1/watchdog/alerts", false},
		{"/", 302, "/watchdog/", true},
		{"/watchdog", 302, "/watchdog/", true},
		{"/-/healthy", 404, "", false},
		{"/metrics", 404, "", false},
		{"/watchdogs/metrics", 404, "", false},
	} {
		resp, err := client.Get(base + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got := string(body)
		if tc.location {
			got = resp.Header.Get("Location")
		}
		if resp.StatusCode != tc.status || !strings.Contains(got, tc.want) {
			t.Errorf("GET %s: %d %q, want %d with %q", tc.path, resp.StatusCode, got, tc.status, tc.want)
		}
	}
}

// TestWaitingServerUnderThePrefixAndAuth: while the configuration cannot
// be used, the probes answer where the daemon's will, behind the same
// basic auth.
func TestWaitingServerUnderThePrefixAndAuth(t *testing.T) {
	file := writeWebConfig(t, t.TempDir(), "basic_auth_users:\n  oncall: "+hash(t, "s3cret")+"\n")
	srv, err := NewWaiting("127.0.0.1:0", WaitingOptions{Gatherer: prometheus.NewRegistry(), Problem: func() string { return "broken" },
		Web: Web{RoutePrefix: "/watchdog", ConfigFile: file}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	run(t, srv)
	base := "http://" + srv.Addr()
	if code, _ := get(t, base+"/watchdog/-/healthy"); code != 401 {
		t.Errorf("liveness without credentials: %d, want 401", code)
	}
	if code, body := getAuth(t, http.DefaultClient, base+"/watchdog/-/healthy", "oncall", "s3cret"); code != 200 || !strings.Contains(body, "waiting") {
		t.Errorf("liveness with credentials: %d %q", code, body)
	}
	if code, body := getAuth(t, http.DefaultClient, base+"/watchdog/-/ready", "oncall", "s3cret"); code != 503 || !strings.Contains(body, "broken") {
		t.Errorf("readiness with credentials: %d %q", code, body)
	}
}

// TestBasicAuthCoversEverything: with basic_auth_users every path, the
// probes included (as in Prometheus), asks for credentials; the right
// ones get through, a wrong password or user does not.
func TestBasicAuthCoversEverything(t *testing.T) {
	file := writeWebConfig(t, t.TempDir(), "basic_auth_users:\n  oncall: "+hash(t, "s3cret")+"\n")
	base := serveWeb(t, Options{Gatherer: prometheus.NewRegistry(), Alerts: &fakeAlerts{ready: make(chan struct{})}, Now: time.Now,
		Web: Web{ConfigFile: file}}, "http")
	for _, path := range []string{"/-/healthy", "/-/ready", "/metrics", "/api/v1/alerts", "/"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic") {
			t.Errorf("GET %s without credentials: %d %q, want 401 asking for basic auth", path, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
		if code, _ := getAuth(t, http.DefaultClient, base+path, "oncall", "s3cret"); code == 401 {
			t.Errorf("GET %s with credentials: 401", path)
		}
	}
	if code, _ := getAuth(t, http.DefaultClient, base+"/-/healthy", "oncall", "wrong"); code != 401 {
		t.Errorf("a wrong password: %d, want 401", code)
	}
	if code, _ := getAuth(t, http.DefaultClient, base+"/-/healthy", "intruder", "s3cret"); code != 401 {
		t.Errorf("an unknown user: %d, want 401", code)
	}
}

// TestTLS: with tls_server_config the listener speaks TLS only, with the
// configured certificate, and headers from http_server_config are sent.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	pki := newPKI(t, dir)
	file := writeWebConfig(t, dir, "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"+
		"http_server_config:\n  headers:\n    Strict-Transport-Security: max-age=31536000\n")
	base := serveWeb(t, Options{Gatherer: prometheus.NewRegistry(), Now: time.Now, Web: Web{ConfigFile: file}}, "https")

	resp, err := pki.client(nil).Get(base + "/-/healthy")
	if err != nil {
		t.Fatalf("GET over TLS trusting the CA: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil || resp.Header.Get("Strict-Transport-Security") != "max-age=31536000" {
		t.Errorf("GET over TLS: %d, TLS %v, HSTS %q", resp.StatusCode, resp.TLS != nil, resp.Header.Get("Strict-Transport-Security"))
	}
	if _, err := (&http.Client{}).Get(base + "/-/healthy"); err == nil {
		t.Error("a client that does not trust the certificate got through")
	}
	plain := "http" + strings.TrimPrefix(base, "https")
	if resp, err := http.Get(plain + "/-/healthy"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("plain HTTP was served on a TLS listener")
		}
	}
}

// TestClientCertificateRequired: with RequireAndVerifyClientCert a client
// without a certificate is refused at the handshake; one the CA signed is
// served.
func TestClientCertificateRequired(t *testing.T) {
	dir := t.TempDir()
	pki := newPKI(t, dir)
	file := writeWebConfig(t, dir, "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"+
		"  client_ca_file: ca.crt\n  client_auth_type: RequireAndVerifyClientCert\n")
	base := serveWeb(t, Options{Gatherer: prometheus.NewRegistry(), Now: time.Now, Web: Web{ConfigFile: file}}, "https")

	if resp, err := pki.client(nil).Get(base + "/-/healthy"); err == nil {
		resp.Body.Close()
		t.Fatalf("a client without a certificate was served: %d", resp.StatusCode)
	}
	resp, err := pki.client(&pki.clientCert).Get(base + "/-/healthy")
	if err != nil {
		t.Fatalf("a client with a certificate the CA signed: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("a client with a certificate: %d", resp.StatusCode)
	}
}

// TestBadWebConfigStopsTheStart: a web configuration that does not load
// stops New with the flag and the file named, before anything listens.
func TestBadWebConfigStopsTheStart(t *testing.T) {
	dir := t.TempDir()
	newPKI(t, dir)
	for _, tc := range []struct {
		name, body, want string
	}{
		{"unknown key", "basic_auth_user:\n  oncall: x\n", "field basic_auth_user not found"},
		{"not a bcrypt hash", "basic_auth_users:\n  oncall: plaintext\n", "hashedSecret too short"},
		{"missing certificate", "tls_server_config:\n  cert_file: nope.crt\n  key_file: server.key\n", "nope.crt"},
		{"key without certificate", "tls_server_config:\n  key_file: server.key\n", "missing one of cert or cert_file"},
		{"client CA without a policy", "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_ca_file: ca.crt\n",
			"client CA's have been configured without a Client Auth Policy"},
		{"a header that cannot be set", "http_server_config:\n  headers:\n    Server: x\n", `HTTP header "Server" can not be configured`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yml")
			if err := os.WriteFile(file, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			listened := false
			_, err := New("127.0.0.1:0", Options{Gatherer: prometheus.NewRegistry(), Now: time.Now, Web: Web{ConfigFile: file},
				Listen: func(network, addr string) (net.Listener, error) { listened = true; return net.Listen(network, addr) }})
			if err == nil || !strings.Contains(err.Error(), "--web.config.file "+file+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want the file named and %q", err, tc.want)
			}
			if listened {
				t.Error("the server bound its address before refusing the web configuration")
			}
			if _, err := NewWaiting("127.0.0.1:0", WaitingOptions{Web: Web{ConfigFile: file}}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewWaiting: %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := New("127.0.0.1:0", Options{Gatherer: prometheus.NewRegistry(), Now: time.Now, Web: Web{ConfigFile: filepath.Join(dir, "missing.yml")}}); err == nil ||
		!strings.Contains(err.Error(), "missing.yml") {
		t.Errorf("a missing file: %v", err)
	}
}

// TestWebConfigReadPerRequest: the toolkit reads the file again on every
// request, as Prometheus does: new users take effect without a restart,
// and a file broken while running answers 500 until it is fixed.
func TestWebConfigReadPerRequest(t *testing.T) {
	dir := t.TempDir()
	file := writeWebConfig(t, dir, "basic_auth_users:\n  oncall: "+hash(t, "s3cret")+"\n")
	base := serveWeb(t, Options{Gatherer: prometheus.NewRegistry(), Now: time.Now, Web: Web{ConfigFile: file}}, "http")
	if code, _ := getAuth(t, http.DefaultClient, base+"/-/healthy", "sre", "other"); code != 401 {
		t.Fatalf("a user not yet configured: %d", code)
	}
	writeWebConfig(t, dir, "basic_auth_users:\n  oncall: "+hash(t, "s3cret")+"\n  sre: "+hash(t, "other")+"\n")
	if code, _ := getAuth(t, http.DefaultClient, base+"/-/healthy", "sre", "other"); code != 200 {
		t.Errorf("a user added to the file: %d, want 200", code)
	}
	writeWebConfig(t, dir, "basic_auth_users: [\n")
	if code, _ := getAuth(t, http.DefaultClient, base+"/-/healthy", "sre", "other"); code != 500 {
		t.Errorf("a file broken while running: %d, want 500", code)
	}
	writeWebConfig(t, dir, "basic_auth_users:\n  sre: "+hash(t, "other")+"\n")
	if code, _ := getAuth(t, http.DefaultClient, base+"/-/healthy", "sre", "other"); code != 200 {
		t.Errorf("the file fixed: %d, want 200", code)
	}
}

// serveWeb runs a server built by New on loopback until the test ends
// and returns its base URL.
func serveWeb(t *testing.T, opts Options, scheme string) string {
	t.Helper()
	opts.Logger = zap.NewNop()
	srv, err := New("127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	run(t, srv)
	return scheme + "://" + srv.Addr()
}

func run(t *testing.T, srv *Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
}

func getAuth(t *testing.T, c *http.Client, url, user, password string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(user, password)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func writeWebConfig(t *testing.T, dir, body string) string {
	t.Helper()
	path := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func hash(t *testing.T, password string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

// pki is a test CA with a server certificate for 127.0.0.1 and a client
// certificate, written as ca.crt, server.crt and server.key in a directory.
type pki struct {
	pool       *x509.CertPool
	clientCert tls.Certificate
}

func newPKI(t *testing.T, dir string) *pki {
	t.Helper()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "watchdog test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, tmpl *x509.Certificate) (certPEM, keyPEM []byte) {
		key := newKey(t)
		tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = big.NewInt(serial), time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	}
	serverCert, serverKey := issue(2, &x509.Certificate{Subject: pkix.Name{CommonName: "watchdog"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	clientCert, clientKey := issue(3, &x509.Certificate{Subject: pkix.Name{CommonName: "prometheus"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	for name, data := range map[string][]byte{"ca.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		"server.crt": serverCert, "server.key": serverKey} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := &pki{pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	if p.clientCert, err = tls.X509KeyPair(clientCert, clientKey); err != nil {
		t.Fatal(err)
	}
	return p
}

// client trusts the CA and presents cert, if any.
func (p *pki) client(cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: p.pool}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
