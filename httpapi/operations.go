package httpapi

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/operation"
)

// policyFields are an operation's declaration as PUT takes it; the name is
// the path's.
type policyFields struct {
	Mode             operation.Mode         `json:"mode"`
	OnLeaseExpiry    operation.ExpiryPolicy `json:"on_lease_expiry"`
	LeaseSeconds     int                    `json:"lease_seconds"`
	MaxTTLSeconds    int                    `json:"max_ttl_seconds"`
	RetentionSeconds int                    `json:"retention_seconds"`
	IgnoredFields    []string               `json:"ignored_fields"`
}

type policyView struct {
	Name string `json:"name"`
	policyFields
}

func viewPolicy(p operation.Policy) policyView {
	ignored := p.IgnoredFields
	if ignored == nil {
		ignored = []string{}
	}
	return policyView{Name: p.Name, policyFields: policyFields{
		Mode:             p.Mode,
		OnLeaseExpiry:    p.OnLeaseExpiry,
		LeaseSeconds:     p.LeaseSeconds,
		MaxTTLSeconds:    p.MaxTTLSeconds,
		RetentionSeconds: p.RetentionSeconds,
		IgnoredFields:    ignored,
	}}
}

func (s *Server) listOperations(c *gin.Context) {
	ps, err := operation.List(c.Request.Context(), s.pool, Caller(c).Tenant)
	if err != nil {
		Abort(c, err)
		return
	}
	items := make([]policyView, 0, len(ps))
	for _, p := range ps {
		items = append(items, viewPolicy(p))
	}
	writeJSON(c, http.StatusOK, struct {
		Items []policyView `json:"items"`
	}{items})
}

func (s *Server) getOperation(c *gin.Context) {
	p, err := operation.Get(c.Request.Context(), s.pool, Caller(c).Tenant, c.Param("name"))
	if errors.Is(err, operation.ErrUnknown) {
		// Here the operation is the resource asked for, so missing is a 404.
		Abort(c, &Problem{Status: http.StatusNotFound, Code: "unknown_operation", Title: "Unknown operation",
			Detail: "the operation is not declared for this tenant"})
		return
	}
	if err != nil {
		Abort(c, err)
		return
	}
	writeJSON(c, http.StatusOK, viewPolicy(p))
}

func (s *Server) putOperation(c *gin.Context) {
	var f policyFields
	if err := Decode(c, &f); err != nil {
		Abort(c, err)
		return
	}
	p, err := operation.Put(c.Request.Context(), s.pool, Caller(c).Tenant, operation.Policy{
		Name:             c.Param("name"),
		Mode:             f.Mode,
		OnLeaseExpiry:    f.OnLeaseExpiry,
		LeaseSeconds:     f.LeaseSeconds,
		MaxTTLSeconds:    f.MaxTTLSeconds,
		RetentionSeconds: f.RetentionSeconds,
		IgnoredFields:    f.IgnoredFields,
	})
	if err != nil {
		Abort(c, err)
		return
	}
	writeJSON(c, http.StatusOK, viewPolicy(p))
}
