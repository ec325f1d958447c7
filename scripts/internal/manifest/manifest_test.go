package manifest

import (
	"errors"
	"strings"
	"testing"
)

type object struct {
	Kind string `json:"kind"`
}

func TestEachSkipsBlankDocuments(t *testing.T) {
	stream := "---\nkind: A\n---\n\n---\n# only a comment\n---\nkind: B\n"
	var kinds []string
	err := Each(strings.NewReader(stream), func(o object) error {
		kinds = append(kinds, o.Kind)
		return nil
	})
	if err != nil || strings.Join(kinds, ",") != "A,,B" {
		t.Errorf("kinds %q, err %v; want A, the comment-only document, B", kinds, err)
	}
}

func TestEachNamesTheDocument(t *testing.T) {
	stream := "kind: A\n---\nkind: B\n---\nkind: [unclosed\n"
	stop := errors.New("stop")
	err := Each(strings.NewReader(stream), func(o object) error {
		if o.Kind == "B" {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || !strings.HasPrefix(err.Error(), "document 1: ") {
		t.Errorf("err %v, want document 1: stop", err)
	}
	err = Each(strings.NewReader(stream), func(object) error { return nil })
	if err == nil || !strings.HasPrefix(err.Error(), "document 2: ") {
		t.Errorf("err %v, want an error about document 2", err)
	}
}
