package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/internal/infra/apikey"
)

// Routes are the groups a Mount registers on, each with its middleware in
// place; routes added to them answer like the built-in ones.
type Routes struct {
	// Public is the root, without authentication: health, metrics, pages.
	Public *gin.RouterGroup
	// Client is /v1 for client and operator keys.
	Client *gin.RouterGroup
	// Operator is /v1/admin for operator keys only.
	Operator *gin.RouterGroup
}

// A Mount registers a group of routes kept in a file or package of its own,
// for example the operator's token routes:
//
//	func(r httpapi.Routes) {
//		r.Operator.POST("/tokens/:id/revoke", revoke)
//	}
type Mount func(Routes)

var (
	errNoRoute  = &Problem{Status: http.StatusNotFound, Code: "not_found", Detail: "no such route"}
	errNoMethod = &Problem{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed", Detail: "the route does not accept this method; see the Allow header"}
)

// routes builds the engine. Every built-in route is registered here, so the
// whole API can be read in one place.
func (s *Server) routes(middleware []gin.HandlerFunc, mounts []Mount) *gin.Engine {
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.HandleMethodNotAllowed = true
	// A path that does not match is a 404, not a redirect to a guess.
	e.RedirectTrailingSlash = false
	e.RedirectFixedPath = false
	// A *gin.Context handed on as a context.Context carries the request's
	// cancellation, like c.Request.Context().
	e.ContextWithFallback = true

	if s.tracing != nil {
		e.Use(s.tracing) // first, so that its span spans the whole request
	}
	e.Use(s.requestID, s.accessLog, s.recoverPanic)
	e.Use(middleware...) // before the body limit, so metrics count 413s too
	e.Use(oneReading, s.limitBody, requireText)
	e.NoRoute(func(c *gin.Context) { Abort(c, errNoRoute) })
	e.NoMethod(func(c *gin.Context) { Abort(c, errNoMethod) })

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/openapi.json", s.openAPI)
	e.GET("/problems/:code", s.problemPage)

	client := e.Group("/v1", s.authenticated(apikey.Client))
	client.POST("/tokens", s.issue)
	client.POST("/tokens/consume", s.consume)
	client.POST("/tokens/:id/complete", s.complete)
	client.POST("/tokens/:id/fail", s.fail)
	client.POST("/tokens/:id/unknown", s.reportUnknown)
	client.GET("/tokens/:id", s.getToken)
	client.GET("/events", s.listEvents)

	operator := e.Group("/v1/admin", s.authenticated(apikey.Operator))
	operator.GET("/operations", s.listOperations)
	operator.GET("/operations/:name", s.getOperation)
	operator.PUT("/operations/:name", s.putOperation)
	operator.DELETE("/operations/:name", s.deleteOperation)
	operator.GET("/tokens", s.listTokens)
	operator.GET("/tokens/:id", s.inspectToken)
	operator.POST("/tokens/:id/revoke", s.revokeToken)
	operator.POST("/tokens/:id/reconcile", s.reconcileToken)
	operator.POST("/purge", s.purge)
	operator.GET("/stats", s.stats)

	r := Routes{Public: &e.RouterGroup, Client: client, Operator: operator}
	for _, m := range mounts {
		m(r)
	}
	return e
}
