// Package manifest is what the CI tools that pick objects out of
// Kubernetes YAML streams (`helm template` output, deploy/kubernetes)
// share: reading the documents, and a command line that writes what was
// picked to -o or stdout. yq is not available in CI.
package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Each decodes every non-blank document of the YAML stream r into a new
// T and calls fn with it, stopping at the first error. An error about a
// document names its position in the stream (from 0).
func Each[T any](r io.Reader, fn func(doc T) error) error {
	rd := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for i := 0; ; i++ {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var v T
		if err := yaml.Unmarshal(doc, &v); err != nil {
			return fmt.Errorf("document %d: %w", i, err)
		}
		if err := fn(v); err != nil {
			return fmt.Errorf("document %d: %w", i, err)
		}
	}
}

// Main runs the tool name: usage is its synopsis, argsOK says whether a
// number of arguments will do, and extract turns the arguments into the
// output, written to the file -o names or to stdout. A wrong command line
// exits 2, a failure 1, with the error on stderr.
func Main(name, usage string, argsOK func(n int) bool, extract func(args []string) ([]byte, error)) {
	out := flag.String("o", "", "output file (default: stdout)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage:", usage)
		flag.PrintDefaults()
	}
	flag.Parse()
	if !argsOK(flag.NArg()) {
		flag.Usage()
		os.Exit(2)
	}
	data, err := extract(flag.Args())
	if err == nil {
		err = write(*out, data)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// write writes data to the file path, or to stdout when path is "".
func write(path string, data []byte) error {
	if path == "" {
		_, err := os.Stdout.Write(data)
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
