// Package promreg registers the metrics of a component that may be built
// again on the same registry. Every other component registers with
// promauto.With(reg); promauto panics on a second registration, and its
// factory hands back the new, unregistered collector, so a rebuilt
// component would count into series nobody gathers.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Reuse registers c on reg and returns it. When reg already holds a
// collector of the same description (the component was built before on
// this registry), Reuse returns that one instead, so its series continue.
// A nil reg registers nothing, as promauto.With(nil) does. Any other
// registration error is a clash between components, a programming error:
// Reuse panics, as promauto does.
func Reuse[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	err := reg.Register(c)
	if err == nil {
		return c
	}
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	panic(err)
}
