package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAPITokenFile(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("  tok-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "watchdog.yaml")
	if err := os.WriteFile(cfgFile, []byte("api:\n  token_file: "+tokenFile+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(Default(), map[string]string{"WATCHDOG_CONFIG": cfgFile, "WATCHDOG_TARGETS": "r=http://127.0.0.1:30000"})
	if err != nil {
		t.Fatal(err)
	}
	if string(cfg.API.Token) != "tok-123" {
		t.Errorf("token not read from the file")
	}
	if s := fmt.Sprintf("%v %+v", cfg.API, cfg); strings.Contains(s, "tok-123") {
		t.Errorf("token printed: %s", s)
	}

	missing := filepath.Join(dir, "absent")
	_, err = Load(Default(), map[string]string{"WATCHDOG_API_TOKEN_FILE": missing, "WATCHDOG_TARGETS": "r=http://127.0.0.1:30000"})
	if err == nil || !strings.Contains(err.Error(), "api.token_file") {
		t.Errorf("missing token file: %v, want an error naming api.token_file", err)
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	if _, err := Load(Default(), map[string]string{"WATCHDOG_API_TOKEN_FILE": empty, "WATCHDOG_TARGETS": "r=http://127.0.0.1:30000"}); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("empty token file: %v", err)
	}
}
