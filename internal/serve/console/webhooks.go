package console

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/internal/infra/dispatch"
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

// attempt is one try of a delivery, as dispatch.Recent reads it.
type attempt struct {
	Attempt    int       `json:"attempt"`
	At         time.Time `json:"at"`
	Status     *int      `json:"status"` // nil when no answer came
	Error      string    `json:"error"`
	DurationMS int64     `json:"duration_ms"`
}

// Said is what the attempt's error adds to its status: the whole of it
// when no answer came; else without the "answered 503" that attempts
// recorded before issue 47 repeated from their status.
func (a attempt) Said() string {
	if a.Status == nil {
		return a.Error
	}
	e := strings.TrimPrefix(a.Error, fmt.Sprintf("answered %d", *a.Status))
	return strings.TrimPrefix(e, ", ")
}

type delivery struct {
	dispatch.Delivery
	Tries []attempt
}

type webhookData struct {
	Endpoint   dispatch.Endpoint
	Deliveries []delivery
	Done       string // what was just done to it
	// RotateKey is the rotate form's Idempotency-Key, new with each
	// rendering of the page: a double click posts it twice, and the second
	// post shows the first rotation's secret instead of rotating again.
	RotateKey string
}

// webhook shows one endpoint with its latest deliveries and every attempt,
// and the actions on it.
func (c *Console) webhook(g *gin.Context) {
	s := sessionOf(g)
	ctx := g.Request.Context()
	e, ok := c.endpoint(g)
	if !ok {
		return
	}
	ds, err := dispatch.Recent(ctx, c.pool, s.Tenant, e.ID, recentDeliveries)
	if err != nil {
		c.fail(g, err)
		return
	}
	d := webhookData{Endpoint: e, RotateKey: "console-" + rand.Text()}
	switch g.Query("done") {
	case "enabled":
		d.Done = "Enabled. Deliveries to this endpoint resume."
	case "disabled":
		d.Done = "Disabled. Nothing is sent to this endpoint until it is enabled; its deliveries wait."
	case "redelivered":
		switch n, _ := strconv.Atoi(g.Query("n")); n {
		case 0:
			d.Done = "Nothing to send: no delivery to this endpoint is failed, pending or parked."
		case 1:
			d.Done = "Sending 1 delivery now."
		default:
			d.Done = "Sending " + strconv.Itoa(n) + " deliveries now."
		}
	}
	for _, x := range ds {
		v := delivery{Delivery: x}
		if len(x.Tries) > 0 {
			if err := json.Unmarshal(x.Tries, &v.Tries); err != nil {
				c.fail(g, err)
				return
			}
		}
		d.Deliveries = append(d.Deliveries, v)
	}
	c.pages.render(g.Writer, http.StatusOK, "webhook.html", &s, d)
}

// endpoint reads the endpoint the URL names; it answers the request itself
// when there is none.
func (c *Console) endpoint(g *gin.Context) (dispatch.Endpoint, bool) {
	e, err := dispatch.Get(g.Request.Context(), c.pool, sessionOf(g).Tenant, g.Param("id"))
	if errors.Is(err, dispatch.ErrNotFound) {
		c.problem(g, http.StatusNotFound, "Your tenant has no webhook endpoint "+strconv.Quote(g.Param("id"))+".")
		return e, false
	}
	if err != nil {
		c.fail(g, err)
		return e, false
	}
	return e, true
}

func (c *Console) enableWebhook(g *gin.Context)  { c.setEnabled(g, true) }
func (c *Console) disableWebhook(g *gin.Context) { c.setEnabled(g, false) }

func (c *Console) setEnabled(g *gin.Context, enabled bool) {
	_, err := dispatch.SetEnabled(g.Request.Context(), c.pool, sessionOf(g).Tenant, g.Param("id"), enabled)
	done := "disabled"
	if enabled {
		done = "enabled"
	}
	c.webhookDone(g, err, url.Values{"done": {done}})
}

// redeliver sends the endpoint's failed deliveries again, and its pending
// and parked ones now rather than at their next attempt: what an operator
// who presses it after a failing banner wants.
func (c *Console) redeliver(g *gin.Context) {
	n, err := dispatch.Redeliver(g.Request.Context(), c.pool, sessionOf(g).Tenant, g.Param("id"), 0, true)
	c.webhookDone(g, err, url.Values{"done": {"redelivered"}, "n": {strconv.FormatInt(n, 10)}})
}

// rotatedData is what the page of a rotated secret shows, once.
type rotatedData struct {
	Endpoint dispatch.Endpoint
	Secret   string
}

// rotateSecret gives the endpoint a new secret and shows it on the answer
// itself, never in a URL: it is not shown again. Until the overlap ends
// deliveries carry both signatures, so receivers can be redeployed at ease.
//
// The form's idempotency_key makes a double click (or a resent form) show
// the first rotation's secret again rather than rotate twice, which would
// stop the secret just shown from signing at once.
func (c *Console) rotateSecret(g *gin.Context) {
	w, err := dispatch.RotateOnce(g.Request.Context(), c.pool, c.keys, sessionOf(g).Tenant, g.Param("id"), g.PostForm("idempotency_key"), c.secretOverlap)
	switch {
	case errors.Is(err, dispatch.ErrKeyReused), errors.Is(err, dispatch.ErrInvalidRequest):
		c.problem(g, http.StatusUnprocessableEntity, "This form was already used for another request; reload the endpoint's page and try again.")
		return
	case err != nil:
		c.webhookDone(g, err, nil)
		return
	}
	s := sessionOf(g)
	c.pages.render(g.Writer, http.StatusOK, "rotated.html", &s, rotatedData{Endpoint: w.Endpoint, Secret: w.Secret})
}

// webhookDone answers an action on the endpoint: back to its page with
// done, or the problem err.
func (c *Console) webhookDone(g *gin.Context, err error, done url.Values) {
	switch {
	case errors.Is(err, dispatch.ErrNotFound):
		c.problem(g, http.StatusNotFound, "Your tenant has no webhook endpoint "+strconv.Quote(g.Param("id"))+".")
	case err != nil:
		c.fail(g, err)
	default:
		g.Redirect(http.StatusSeeOther, c.path+"/webhooks/"+url.PathEscape(g.Param("id"))+"?"+done.Encode())
	}
}
