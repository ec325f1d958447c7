package detect

import "fmt"

// MarshalText writes the severity as its name, so documents and APIs
// carry "critical", not a number.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a severity name; "" reads as Info, as a document
// that never set one shows it.
func (s *Severity) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*s = Info
		return nil
	}
	v, ok := ParseSeverity(string(b))
	if !ok {
		return fmt.Errorf("severity %q: want critical, warning or info", b)
	}
	*s = v
	return nil
}
