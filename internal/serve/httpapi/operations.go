package httpapi

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/client"
	"github.com/tokend/tokend/operation"
)

// viewPolicy is an operation's declaration as the API answers it: every
// field, defaults applied.
func viewPolicy(p operation.Policy) client.Operation {
	ignored := p.IgnoredFields
	if ignored == nil {
		ignored = []string{}
	}
	return client.Operation{Name: p.Name, Policy: client.Policy{
		Mode:             string(p.Mode),
		OnLeaseExpiry:    string(p.OnLeaseExpiry),
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
	list := client.OperationList{Items: make([]client.Operation, 0, len(ps))}
	for _, p := range ps {
		list.Items = append(list.Items, viewPolicy(p))
	}
	WriteJSON(c, http.StatusOK, list)
}

// errOperationNotFound answers for an operation that is the resource asked
// for (GET, DELETE), so missing is a 404; naming one in a token request is a 400.
var errOperationNotFound = &Problem{Status: http.StatusNotFound, Code: "unknown_operation", Title: "Unknown operation",
	Detail: "the operation is not declared for this tenant"}

func (s *Server) getOperation(c *gin.Context) {
	answerOperation(c)(operation.Get(c.Request.Context(), s.pool, Caller(c).Tenant, c.Param("name"), s.spender.Handlers()))
}

// deleteOperation removes a declaration and answers with it.
func (s *Server) deleteOperation(c *gin.Context) {
	answerOperation(c)(operation.Delete(c.Request.Context(), s.pool, Caller(c).Tenant, c.Param("name"), s.spender.Handlers()))
}

// answerOperation answers with the declaration a call on the operation the
// path names returned: 404 when it is not declared.
func answerOperation(c *gin.Context) func(operation.Policy, error) {
	return func(p operation.Policy, err error) {
		switch {
		case errors.Is(err, operation.ErrUnknown):
			Abort(c, errOperationNotFound)
		case err != nil:
			Abort(c, err)
		default:
			WriteJSON(c, http.StatusOK, viewPolicy(p))
		}
	}
}

func (s *Server) putOperation(c *gin.Context) {
	var f client.Policy // the name is the path's
	if err := Decode(c, &f); err != nil {
		Abort(c, err)
		return
	}
	p, err := operation.Put(c.Request.Context(), s.pool, Caller(c).Tenant, operation.Policy{
		Name:             c.Param("name"),
		Mode:             operation.Mode(f.Mode),
		OnLeaseExpiry:    operation.ExpiryPolicy(f.OnLeaseExpiry),
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
	WriteJSON(c, http.StatusOK, viewPolicy(p))
}
