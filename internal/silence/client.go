package silence

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Client talks to a daemon's silences API (watchdog silence).
type Client struct {
	// BaseURL is the daemon, e.g. http://localhost:9402.
	BaseURL string
	// Token is sent as the bearer token of mutations.
	Token string
	HTTP  *http.Client
}

// List returns every silence the daemon holds.
func (c *Client) List(ctx context.Context) ([]Status, error) {
	var out struct {
		Silences []Status `json:"silences"`
	}
	err := c.do(ctx, http.MethodGet, "/api/v1/silences", nil, &out)
	return out.Silences, err
}

// Add creates a silence and returns it with its ID.
func (c *Client) Add(ctx context.Context, req Request) (Status, error) {
	var out Status
	body, err := json.Marshal(req)
	if err != nil {
		return out, err
	}
	err = c.do(ctx, http.MethodPost, "/api/v1/silences", body, &out)
	return out, err
}

// Expire ends a silence now.
func (c *Client) Expire(ctx context.Context, id string) (Status, error) {
	var out Status
	err := c.do(ctx, http.MethodDelete, "/api/v1/silences/"+url.PathEscape(id), nil, &out)
	return out, err
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.BaseURL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" && method != http.MethodGet {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	client := c.HTTP
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return errorOf(resp.StatusCode, data)
	}
	return json.Unmarshal(data, out)
}
