// Package webhookapi serves the operator's webhook routes: registering,
// listing, enabling, rotating and redelivering the endpoints package
// dispatch delivers to. It is a Mount of httpapi, kept out of dispatch so
// that the delivery machinery does not depend on the HTTP server.
package webhookapi

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/client"
	"github.com/tokend/tokend/internal/infra/dispatch"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/token"
)

// recentDeliveries is how many deliveries GET /v1/admin/webhooks/{id} shows.
const recentDeliveries = 20

// Mount serves the operator's webhook routes under /v1/admin/webhooks,
// registering endpoints under o.
func Mount(pool *pgxpool.Pool, keys *token.Keyring, o dispatch.Options) httpapi.Mount {
	h := &handlers{pool: pool, keys: keys, opts: o}
	return func(r httpapi.Routes) {
		r.Operator.POST("/webhooks", h.create)
		r.Operator.GET("/webhooks", h.list)
		r.Operator.GET("/webhook-stats", h.stats)
		r.Operator.GET("/webhooks/:id", h.get)
		r.Operator.DELETE("/webhooks/:id", h.delete)
		r.Operator.POST("/webhooks/:id/enable", h.enable)
		r.Operator.POST("/webhooks/:id/disable", h.disable)
		r.Operator.POST("/webhooks/:id/redeliver", h.redeliver)
		r.Operator.POST("/webhooks/:id/rotate-secret", h.rotate)
	}
}

type handlers struct {
	pool *pgxpool.Pool
	keys *token.Keyring
	opts dispatch.Options
}

// problem is the answer to a refusal of package dispatch; its detail is
// dispatch.Explain's sentence, never the error's "dispatch: …" chain.
func problem(err error) error {
	switch {
	case errors.Is(err, dispatch.ErrNotFound):
		return &httpapi.Problem{Status: http.StatusNotFound, Code: "not_found", Detail: dispatch.Explain(err)}
	case errors.Is(err, dispatch.ErrInvalidRequest), errors.Is(err, dispatch.ErrHostNotAllowed):
		return &httpapi.Problem{Status: http.StatusBadRequest, Code: "invalid_request", Detail: dispatch.Explain(err)}
	case errors.Is(err, dispatch.ErrKeyReused):
		return &httpapi.Problem{Status: http.StatusUnprocessableEntity, Code: "idempotency_key_reused", Title: "Idempotency key reused", Detail: dispatch.Explain(err)}
	case errors.Is(err, dispatch.ErrTooManyEndpoints):
		return &httpapi.Problem{Status: http.StatusConflict, Code: "too_many_endpoints", Detail: dispatch.Explain(err)}
	}
	return err
}

func (h *handlers) create(c *gin.Context) {
	var req client.WebhookRequest
	if err := httpapi.Decode(c, &req); err != nil {
		httpapi.Abort(c, err)
		return
	}
	w, err := dispatch.CreateOnce(c.Request.Context(), h.pool, h.keys, h.opts, httpapi.Caller(c).Tenant, c.GetHeader("Idempotency-Key"),
		dispatch.NewEndpoint{URL: req.URL, EventTypes: req.EventTypes})
	if err != nil {
		httpapi.Abort(c, problem(err))
		return
	}
	writeSecret(c, http.StatusCreated, w)
}

func (h *handlers) list(c *gin.Context) {
	eps, err := dispatch.List(c.Request.Context(), h.pool, httpapi.Caller(c).Tenant)
	if err != nil {
		httpapi.Abort(c, err)
		return
	}
	list := client.WebhookList{Items: make([]client.Webhook, 0, len(eps))}
	for _, e := range eps {
		list.Items = append(list.Items, dispatch.View(e))
	}
	httpapi.WriteJSON(c, http.StatusOK, list)
}

// stats answers the caller's tenant's webhook figures, and only its own:
// the tenant comes from the API key.
func (h *handlers) stats(c *gin.Context) {
	s, err := dispatch.Stats(c.Request.Context(), h.pool, httpapi.Caller(c).Tenant)
	if err != nil {
		httpapi.Abort(c, problem(err))
		return
	}
	httpapi.WriteJSON(c, http.StatusOK, s)
}

func (h *handlers) get(c *gin.Context) {
	tenant, id := httpapi.Caller(c).Tenant, c.Param("id")
	e, err := dispatch.Get(c.Request.Context(), h.pool, tenant, id)
	if err != nil {
		httpapi.Abort(c, problem(err))
		return
	}
	ds, err := dispatch.Recent(c.Request.Context(), h.pool, tenant, id, recentDeliveries)
	if err != nil {
		httpapi.Abort(c, err)
		return
	}
	if ds == nil {
		ds = []dispatch.Delivery{}
	}
	v := dispatch.View(e)
	v.Deliveries = ds
	httpapi.WriteJSON(c, http.StatusOK, v)
}

func (h *handlers) delete(c *gin.Context) {
	h.answer(c)(dispatch.Delete(c.Request.Context(), h.pool, httpapi.Caller(c).Tenant, c.Param("id")))
}

func (h *handlers) enable(c *gin.Context) {
	h.answer(c)(dispatch.SetEnabled(c.Request.Context(), h.pool, httpapi.Caller(c).Tenant, c.Param("id"), true))
}

func (h *handlers) disable(c *gin.Context) {
	h.answer(c)(dispatch.SetEnabled(c.Request.Context(), h.pool, httpapi.Caller(c).Tenant, c.Param("id"), false))
}

func (h *handlers) answer(c *gin.Context) func(dispatch.Endpoint, error) {
	return func(e dispatch.Endpoint, err error) {
		if err != nil {
			httpapi.Abort(c, problem(err))
			return
		}
		httpapi.WriteJSON(c, http.StatusOK, dispatch.View(e))
	}
}

func (h *handlers) redeliver(c *gin.Context) {
	var req client.Redelivery
	if err := httpapi.Decode(c, &req); err != nil {
		httpapi.Abort(c, err)
		return
	}
	n, err := dispatch.Resend(c.Request.Context(), h.pool, httpapi.Caller(c).Tenant, c.Param("id"),
		dispatch.Selection{After: req.After, Position: req.Position, All: req.All, Delivered: req.Delivered})
	if err != nil {
		httpapi.Abort(c, problem(err))
		return
	}
	httpapi.WriteJSON(c, http.StatusOK, client.Redelivered{Redelivered: n})
}

func (h *handlers) rotate(c *gin.Context) {
	var req client.SecretRotation
	if c.Request.ContentLength != 0 { // no body: the server's overlap
		if err := httpapi.Decode(c, &req); err != nil {
			httpapi.Abort(c, err)
			return
		}
	}
	if req.OverlapSeconds < 0 || req.OverlapSeconds > maxOverlapSeconds {
		httpapi.Abort(c, &httpapi.Problem{Status: http.StatusBadRequest, Code: "invalid_request",
			Detail: fmt.Sprintf("overlap_seconds: want 0 (the server's default) to %d", maxOverlapSeconds)})
		return
	}
	overlap := cmp.Or(time.Duration(req.OverlapSeconds)*time.Second, h.opts.SecretOverlap, dispatch.DefaultSecretOverlap)
	w, err := dispatch.RotateOnce(c.Request.Context(), h.pool, h.keys, httpapi.Caller(c).Tenant, c.Param("id"), c.GetHeader("Idempotency-Key"), overlap)
	if err != nil {
		httpapi.Abort(c, problem(err))
		return
	}
	writeSecret(c, http.StatusOK, w)
}

// writeSecret answers the endpoint with its new secret, shown to this
// request and to its retries under the same Idempotency-Key (with
// Idempotent-Replayed: true): no cache may keep it.
func writeSecret(c *gin.Context, status int, w dispatch.Written) {
	c.Header("Cache-Control", "no-store")
	if w.Replayed {
		c.Header("Idempotent-Replayed", "true")
	}
	httpapi.WriteJSON(c, status, w.View())
}

// maxOverlapSeconds bounds a rotation's overlap: a week.
const maxOverlapSeconds = 7 * 24 * 3600
