// Package clienttest holds the client's tests that need a real tokend: the
// client is a module of its own that depends on nothing but the standard
// library, so its own tests stand in for tokend with httptest, and the tests
// that drive it against tokend's API, its database and its OpenAPI document
// live here, in tokend's module.
package clienttest
