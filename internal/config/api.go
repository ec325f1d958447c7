package config

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// API is api: access to the daemon's mutating HTTP endpoints (the
// silences API and form).
type API struct {
	// TokenFile holds the bearer token those endpoints require
	// (WATCHDOG_API_TOKEN_FILE overrides it). Empty: they are off and
	// answer 403. Read at start-up; a change needs a restart.
	TokenFile string `yaml:"token_file"`
	// Token is the file's content (surrounding whitespace trimmed); never
	// printed or encoded.
	Token notify.Secret `yaml:"-"`
}

// resolveAPI applies WATCHDOG_API_TOKEN_FILE and reads the token file. A
// configured file that is missing or empty is an error: the operator asked
// for the API and would otherwise get a daemon that refuses every change.
func (c *Config) resolveAPI(environ map[string]string) error {
	if f, ok := environ["WATCHDOG_API_TOKEN_FILE"]; ok {
		c.API.TokenFile = f
	}
	if c.API.TokenFile == "" {
		return nil
	}
	b, err := os.ReadFile(c.API.TokenFile)
	if err != nil {
		return fmt.Errorf("api.token_file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return errors.New("api.token_file: " + c.API.TokenFile + " is empty")
	}
	c.API.Token = notify.Secret(token)
	return nil
}
