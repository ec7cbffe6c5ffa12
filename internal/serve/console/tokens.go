package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend"
	"github.com/tokend/tokend/admin"
	"github.com/tokend/tokend/inspect"
	"github.com/tokend/tokend/internal/infra/jsonread"
	"github.com/tokend/tokend/token"
)

// tabOrder is the order of the list's state tabs, after "all": the states
// that wait for an operator or a lease holder first.
var tabOrder = []token.State{token.Unknown, token.Pending, token.Issued, token.Failed, token.Consumed, token.Revoked, token.Expired}

const (
	allStates = "all"
	pageSize  = 50
	maxReason = 500
)

type tab struct {
	State   string
	Count   int64 // for unknown and pending, the tokens waiting; -1 for the others
	Current bool
}

type listData struct {
	State  string // the tab shown
	Query  string // the search, "" for none
	Tabs   []tab
	Tokens []token.Record
	Next   string // the next page's URL, "" on the last one
}

// list shows a page of the tenant's tokens in one state, those whose subject
// or intent ID is the search q, if any. Without a state it shows the unknown
// tokens when some wait for an operator, and all tokens otherwise. A search
// that is a token's ID goes to that token.
func (c *Console) list(g *gin.Context) {
	s := sessionOf(g)
	ctx := g.Request.Context()
	q := strings.TrimSpace(g.Query("q"))
	if token.ValidID(q) {
		if _, err := inspect.Get(ctx, c.pool, s.Tenant, q); err == nil {
			g.Redirect(http.StatusSeeOther, c.path+"/tokens/"+url.PathEscape(q))
			return
		}
	}
	waiting, err := admin.UnresolvedTenant(ctx, c.pool, s.Tenant)
	if err != nil {
		c.fail(g, err)
		return
	}
	state := g.Query("state")
	if state == "" {
		state = allStates
		if waiting.Unknown > 0 && q == "" {
			state = string(token.Unknown)
		}
	}
	f := inspect.Filter{Limit: pageSize, Cursor: g.Query("cursor"), Search: q}
	if state != allStates {
		st, err := token.ParseState(state)
		if err != nil {
			c.problem(g, http.StatusBadRequest, "There is no token state called "+strconv.Quote(state)+".")
			return
		}
		f.State = st
	}
	items, next, err := inspect.List(ctx, c.pool, s.Tenant, f)
	if errors.Is(err, inspect.ErrInvalidFilter) {
		c.problem(g, http.StatusBadRequest, "That search or page does not exist; start from the first one.")
		return
	}
	if err != nil {
		c.fail(g, err)
		return
	}
	d := listData{State: state, Query: q, Tokens: items}
	d.Tabs = append(d.Tabs, tab{State: allStates, Count: -1, Current: state == allStates})
	for _, st := range tabOrder {
		t := tab{State: string(st), Count: -1, Current: string(st) == state}
		switch st {
		case token.Unknown:
			t.Count = waiting.Unknown
		case token.Pending:
			t.Count = waiting.Pending
		}
		d.Tabs = append(d.Tabs, t)
	}
	if next != "" {
		v := url.Values{"state": {state}, "cursor": {next}}
		if q != "" {
			v.Set("q", q)
		}
		d.Next = c.path + "/tokens?" + v.Encode()
	}
	c.pages.render(g.Writer, http.StatusOK, "tokens.html", &s, d)
}

type tokenData struct {
	Token   token.Record
	Events  []inspect.Event
	Outcome string // the stored body, indented
	Done    string // what was just done to it
	Problem string
}

// show shows one token and its event timeline.
func (c *Console) show(g *gin.Context) {
	done := ""
	switch g.Query("done") {
	case "revoked":
		done = "Revoked. Every submit of this token is now refused."
	case "reconciled":
		done = "Reconciled. Spends of this token now get the outcome you recorded."
	}
	c.showToken(g, http.StatusOK, done, "")
}

func (c *Console) showToken(g *gin.Context, status int, done, problem string) {
	s := sessionOf(g)
	rec, ok := c.token(g)
	if !ok {
		return
	}
	events, err := inspect.Events(g.Request.Context(), c.pool, s.Tenant, rec.ID)
	if err != nil {
		c.fail(g, err)
		return
	}
	d := tokenData{Token: rec, Events: events, Done: done, Problem: problem}
	if len(rec.ResultBody) > 0 {
		var b bytes.Buffer
		if json.Indent(&b, rec.ResultBody, "", "  ") == nil {
			d.Outcome = b.String()
		} else {
			d.Outcome = string(rec.ResultBody)
		}
	}
	c.pages.render(g.Writer, status, "token.html", &s, d)
}

// token reads the token the URL names; it answers the request itself when
// there is none.
func (c *Console) token(g *gin.Context) (token.Record, bool) {
	rec, err := inspect.Get(g.Request.Context(), c.pool, sessionOf(g).Tenant, g.Param("id"))
	if errors.Is(err, token.ErrNotFound) {
		c.problem(g, http.StatusNotFound, "Your tenant has no token "+strconv.Quote(g.Param("id"))+".")
		return token.Record{}, false
	}
	if err != nil {
		c.fail(g, err)
		return token.Record{}, false
	}
	return rec, true
}

type revokeData struct {
	Token   token.Record
	Reason  string
	Problem string
}

// revokePage asks the operator to confirm a revocation.
func (c *Console) revokePage(g *gin.Context) {
	c.confirmPage(g, token.Issued, "Only an issued token can be revoked", "revoke.html",
		func(rec token.Record) any { return revokeData{Token: rec} })
}

// confirmPage shows page, with data for the token in the path, to confirm
// an action that only a token in state want allows; another token is
// shown with refused and its state.
func (c *Console) confirmPage(g *gin.Context, want token.State, refused, page string, data func(token.Record) any) {
	s := sessionOf(g)
	rec, ok := c.token(g)
	if !ok {
		return
	}
	if rec.State != want {
		c.showToken(g, http.StatusConflict, "", fmt.Sprintf("%s; this one is %s.", refused, rec.State))
		return
	}
	c.pages.render(g.Writer, http.StatusOK, page, &s, data(rec))
}

func (c *Console) revoke(g *gin.Context) {
	s := sessionOf(g)
	reason := strings.TrimSpace(g.PostForm("reason"))
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	rec, err := admin.Revoke(g.Request.Context(), c.pool, s.Tenant, g.Param("id"), admin.Revocation{Reason: reason, Actor: s.KeyID})
	c.notify(g, rec, err)
	switch {
	case errors.Is(err, token.ErrNotFound):
		c.problem(g, http.StatusNotFound, "Your tenant has no token "+strconv.Quote(g.Param("id"))+".")
	case errors.Is(err, token.ErrInvalidState):
		c.showToken(g, http.StatusConflict, "", "Not revoked: only an issued token can be revoked, and this one moved on first.")
	case err != nil:
		c.fail(g, err)
	default:
		g.Redirect(http.StatusSeeOther, c.path+"/tokens/"+url.PathEscape(g.Param("id"))+"?done=revoked")
	}
}

type reconcileData struct {
	Token                   token.Record
	Outcome, Status, Result string // what the form shows
	Problem                 string
}

// reconcilePage asks the operator what happened to a token whose outcome is
// unknown, and to confirm it.
func (c *Console) reconcilePage(g *gin.Context) {
	c.confirmPage(g, token.Unknown, "Only a token whose outcome is unknown can be reconciled", "reconcile.html",
		func(rec token.Record) any { return reconcileData{Token: rec} })
}

func (c *Console) reconcile(g *gin.Context) {
	s := sessionOf(g)
	d := reconcileData{Outcome: g.PostForm("outcome"), Status: strings.TrimSpace(g.PostForm("status")), Result: strings.TrimSpace(g.PostForm("result"))}
	r, err := d.reconciliation(s.KeyID)
	if err == nil {
		var rec token.Record
		rec, err = admin.Reconcile(g.Request.Context(), c.pool, s.Tenant, g.Param("id"), r)
		c.notify(g, rec, err)
	}
	var invalid *tokend.InvalidInputError
	switch {
	case errors.As(err, &invalid):
		rec, ok := c.token(g)
		if !ok {
			return
		}
		d.Token = rec
		d.Problem = "Not reconciled: " + invalid.Detail() + "."
		c.pages.render(g.Writer, http.StatusUnprocessableEntity, "reconcile.html", &s, d)
	case errors.Is(err, token.ErrNotFound):
		c.problem(g, http.StatusNotFound, "Your tenant has no token "+strconv.Quote(g.Param("id"))+".")
	case errors.Is(err, token.ErrInvalidState):
		c.showToken(g, http.StatusConflict, "", "Not reconciled: only a token whose outcome is unknown can be reconciled, and this one moved on first.")
	case err != nil:
		c.fail(g, err)
	default:
		g.Redirect(http.StatusSeeOther, c.path+"/tokens/"+url.PathEscape(g.Param("id"))+"?done=reconciled")
	}
}

// reconciliation reads the operator's verdict from the form, wrapping
// admin.ErrInvalidRequest when it cannot be one.
func (d reconcileData) reconciliation(actor string) (admin.Reconciliation, error) {
	r := admin.Reconciliation{Outcome: admin.Outcome(d.Outcome), Actor: actor}
	if d.Status != "" {
		n, err := strconv.Atoi(d.Status)
		if err != nil {
			return r, tokend.Invalid(admin.ErrInvalidRequest, "status", "is not a number")
		}
		r.Status = n
	}
	if d.Result != "" {
		if err := jsonread.Check([]byte(d.Result)); err != nil {
			return r, tokend.Invalid(admin.ErrInvalidRequest, "result", "is not JSON that reads one way: "+err.Error())
		}
		r.Result = json.RawMessage(d.Result)
	}
	return r, r.Validate()
}

// problem shows a page that says what is wrong, with status.
func (c *Console) problem(g *gin.Context, status int, msg string) {
	s, _ := c.current(g.Request)
	c.pages.render(g.Writer, status, "problem.html", &s, msg)
}

// fail logs err and shows a page that says something went wrong.
func (c *Console) fail(g *gin.Context, err error) {
	c.log.Error("console", "path", g.FullPath(), "err", err)
	c.problem(g, http.StatusInternalServerError, "Something went wrong on our side; nothing was changed. Try again in a moment.")
}

// notify tells Config.Changed about a committed change.
func (c *Console) notify(g *gin.Context, rec token.Record, err error) {
	if err == nil && c.changed != nil {
		c.changed(context.WithoutCancel(g.Request.Context()), rec)
	}
}
