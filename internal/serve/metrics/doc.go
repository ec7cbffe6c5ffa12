// Package metrics exposes tokend's Prometheus metrics on a registry of its
// own, never the global one, so that nothing a dependency registers leaks
// onto /metrics and tests can build as many as they like.
//
// Label values come from small fixed sets only: route templates, methods,
// statuses, outcomes, cache kinds and results, breaker and token states.
// A value outside its set is recorded as "other". Nothing a caller sends —
// a path, a token id, a secret, an API key, a subject, a tenant — ever
// becomes a label value, which keeps secrets off /metrics and the number of
// series bounded.
package metrics
