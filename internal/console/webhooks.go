package console

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/internal/dispatch"
)

// recentDeliveries is how many deliveries an endpoint's page shows.
const recentDeliveries = 50

// webhooks lists the tenant's webhook endpoints.
func (c *Console) webhooks(g *gin.Context) {
	s := sessionOf(g)
	eps, err := dispatch.List(g.Request.Context(), c.pool, s.Tenant)
	if err != nil {
		c.fail(g, err)
		return
	}
	c.pages.render(g.Writer, http.StatusOK, "webhooks.html", &s, eps)
}

type webhookData struct {
	Endpoint   dispatch.Endpoint
	Deliveries []dispatch.Delivery
}

// webhook shows one endpoint with its latest deliveries and every attempt.
func (c *Console) webhook(g *gin.Context) {
	s := sessionOf(g)
	ctx := g.Request.Context()
	e, err := dispatch.Get(ctx, c.pool, s.Tenant, g.Param("id"))
	if errors.Is(err, dispatch.ErrNotFound) {
		c.problem(g, http.StatusNotFound, "Your tenant has no webhook endpoint "+strconv.Quote(g.Param("id"))+".")
		return
	}
	if err != nil {
		c.fail(g, err)
		return
	}
	ds, err := dispatch.Recent(ctx, c.pool, s.Tenant, e.ID, recentDeliveries)
	if err != nil {
		c.fail(g, err)
		return
	}
	c.pages.render(g.Writer, http.StatusOK, "webhook.html", &s, webhookData{Endpoint: e, Deliveries: ds})
}
