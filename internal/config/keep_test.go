package config

import (
	"strings"
	"testing"
)

// scrape.keep_all_families is off by default, on when set, and anything
// but a boolean is an error with its line (the loader's decoding errors
// name the line, as for every typed key).
func TestKeepAllFamilies(t *testing.T) {
	if Default().Scrape.KeepAllFamilies {
		t.Error("keep_all_families is on by default")
	}
	cfg, err := Parse(Default(), []byte("scrape: {keep_all_families: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Scrape.KeepAllFamilies {
		t.Error("keep_all_families: true was not applied")
	}
	_, err = Parse(Default(), []byte("scrape: {keep_all_families: maybe}\n"))
	if err == nil || !strings.Contains(err.Error(), "line 1") || !strings.Contains(err.Error(), "maybe") {
		t.Errorf("keep_all_families: maybe gave %v, want an error naming the line and the value", err)
	}
}

// scrape.filter_families is on by default and off when set false.
func TestFilterFamilies(t *testing.T) {
	if !Default().Scrape.FilterFamilies {
		t.Error("filter_families is off by default")
	}
	cfg, err := Parse(Default(), []byte("scrape: {filter_families: false}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Scrape.FilterFamilies {
		t.Error("filter_families: false was not applied")
	}
}
