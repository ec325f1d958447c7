// Package httpclient builds the HTTP clients nobody configures (the
// scraper's, the heartbeat's, the notifiers' defaults) the way a
// configured one is built: with Prometheus' client configuration
// (github.com/prometheus/common/config), whose options also carry a test's
// in-memory network (WithDialContextFunc).
package httpclient

import (
	"net/http"
	"time"

	commoncfg "github.com/prometheus/common/config"
)

// config is Prometheus' default client configuration (redirects
// followed, HTTP/2) with the proxy taken from the environment
// (HTTPS_PROXY, NO_PROXY), as Go's default transport takes it.
func config() commoncfg.HTTPClientConfig {
	c := commoncfg.DefaultHTTPClientConfig
	c.ProxyFromEnvironment = true
	return c
}

// New returns a client whose requests end after timeout (0: only the
// request's context ends them). name labels its connections in
// go-conntrack's dial metrics and traces. The transport neither asks for
// gzip nor inflates it (Prometheus' choice): a caller that wants a
// compressed answer asks for it and inflates it itself.
func New(name string, timeout time.Duration, opts ...commoncfg.HTTPClientOption) *http.Client {
	c, err := commoncfg.NewClientFromConfig(config(), name, opts...)
	if err != nil {
		// Only TLS files, credentials and secret references can fail; the
		// default configuration has none.
		panic("httpclient: the default configuration failed: " + err.Error())
	}
	c.Timeout = timeout
	return c
}
