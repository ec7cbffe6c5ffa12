// Package openapi holds tokend's OpenAPI 3.1 document, the one description
// of its REST API: tokend serves it at GET /openapi.json, serves the problem
// pages its problem types point to from it, and the contract tests validate
// every request and answer of httpapi's and the client's tests against it.
package openapi

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/goccy/go-yaml"
)

// YAML is the document as written.
//
//go:embed openapi.yaml
var YAML []byte

// ProblemDoc says what one problem code means.
type ProblemDoc struct {
	Code     string `json:"-"`
	Status   int    `json:"status"`
	Title    string `json:"title"`
	Happened string `json:"happened"`
	Next     string `json:"next"`
}

var load = sync.OnceValues(func() (doc, error) {
	j, err := yaml.YAMLToJSON(YAML)
	if err != nil {
		return doc{}, fmt.Errorf("openapi: %w", err)
	}
	var d struct {
		Problems map[string]ProblemDoc `json:"x-problems"`
	}
	if err := json.Unmarshal(j, &d); err != nil {
		return doc{}, fmt.Errorf("openapi: %w", err)
	}
	for c, p := range d.Problems {
		p.Code = c
		d.Problems[c] = p
	}
	return doc{json: j, problems: d.Problems}, nil
})

type doc struct {
	json     []byte
	problems map[string]ProblemDoc
}

// JSON returns the document in JSON, converted once.
func JSON() ([]byte, error) {
	d, err := load()
	return d.json, err
}

// Problems returns the problem codes the document lists, by code.
func Problems() (map[string]ProblemDoc, error) {
	d, err := load()
	return d.problems, err
}
