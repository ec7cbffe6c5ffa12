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
	EventOutcome     bool                   `json:"event_outcome"`
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
		EventOutcome:     p.EventOutcome,
	}}
}

func (s *Server) listOperations(c *gin.Context) {
	ps, err := operation.List(c.Request.Context(), s.pool, Caller(c).Tenant, s.spender.Handlers())
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

// errOperationNotFound answers for an operation that is the resource asked
// for (GET, DELETE), so missing is a 404; naming one in a token request is a 400.
var errOperationNotFound = &Problem{Status: http.StatusNotFound, Code: "unknown_operation", Title: "Unknown operation",
	Detail: "the operation is not declared for this tenant"}

func (s *Server) getOperation(c *gin.Context) {
	p, err := operation.Get(c.Request.Context(), s.pool, Caller(c).Tenant, c.Param("name"), s.spender.Handlers())
	if errors.Is(err, operation.ErrUnknown) {
		Abort(c, errOperationNotFound)
		return
	}
	if err != nil {
		Abort(c, err)
		return
	}
	writeJSON(c, http.StatusOK, viewPolicy(p))
}

// deleteOperation removes a declaration and answers with it.
func (s *Server) deleteOperation(c *gin.Context) {
	p, err := operation.Delete(c.Request.Context(), s.pool, Caller(c).Tenant, c.Param("name"), s.spender.Handlers())
	if errors.Is(err, operation.ErrUnknown) {
		Abort(c, errOperationNotFound)
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
		EventOutcome:     f.EventOutcome,
	}, s.spender.Handlers())
	if err != nil {
		Abort(c, err)
		return
	}
	writeJSON(c, http.StatusOK, viewPolicy(p))
}
