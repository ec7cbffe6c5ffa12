package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/internal/infra/apikey"
	"github.com/tokend/tokend/internal/serve/keyrate"
	"github.com/tokend/tokend/internal/serve/websession"
	"github.com/tokend/tokend/token"
)

// Defaults of Config.
const (
	DefaultPath       = "/console"
	DefaultSessionTTL = time.Hour
)

// Config configures the console.
type Config struct {
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// SecretKey is the server key (TOKEND_SECRET_KEY); the key that signs
	// sessions is derived from it. Required.
	SecretKey string
	// Resolve resolves the API key an operator signs in with; it returns an
	// error wrapping apikey.ErrUnauthorized for a key that is not valid.
	// Default: apikey.Resolve on Pool.
	Resolve func(ctx context.Context, presented string) (apikey.Key, error)
	// Live returns nil while tenant's key keyID, which a session was signed
	// in with, may still be used, and an error wrapping
	// apikey.ErrUnauthorized once it is revoked (or gone). It is asked on
	// every request of a signed-in session, so a revoked key's sessions end
	// at once. Default: apikey.Live on Pool.
	Live func(ctx context.Context, tenant, keyID string) error
	// Path is where the console is mounted. Default DefaultPath.
	Path string
	// SessionTTL is how long a sign-in lasts. Default DefaultSessionTTL.
	SessionTTL time.Duration
	// Logger receives the errors that pages do not show. Default slog.Default().
	Logger *slog.Logger
	// Changed, when set, is told of every token an operator revoked or
	// reconciled here, after the commit, so a cache can drop its copy.
	Changed func(ctx context.Context, rec token.Record)
	// SecretOverlap is how long a webhook secret rotated here keeps signing
	// beside the new one (TOKEND_WEBHOOK_SECRET_OVERLAP). Default
	// dispatch.DefaultSecretOverlap.
	SecretOverlap time.Duration
	// Allow, when set, takes one request of the rate of the API key keyID a
	// session was signed in with, and says whether it may go on, or how
	// long to wait: the API's limit (httpapi.Server.Allow), so that the
	// console is no way around it. Asked before any database work of a
	// signed-in request. Default: no limit.
	Allow func(ctx context.Context, keyID string) (bool, time.Duration)
	// SignInLimit bounds how fast one client address may try to sign in,
	// successfully or not, so that API keys cannot be guessed here faster
	// than the API lets a key be used. Default DefaultSignInLimit.
	SignInLimit SignInLimit
	// Now is the clock of the sign-in limit. Default time.Now.
	Now func() time.Time
}

// SignInLimit is a token bucket per client address: PerSecond attempts
// sustained, Burst at once after idling.
type SignInLimit struct {
	PerSecond float64
	Burst     int
}

// DefaultSignInLimit lets a person mistype a key a few times, and a guesser
// try ten keys a minute per address: at 256 bits a key, nothing.
var DefaultSignInLimit = SignInLimit{PerSecond: 1.0 / 6, Burst: 10}

// Validate reports whether c is usable.
func (c Config) Validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("console: Config.Pool is required")
	case len(c.SecretKey) < token.MinKeyLen:
		return fmt.Errorf("console: Config.SecretKey must be at least %d bytes", token.MinKeyLen)
	case c.Path != "" && (!strings.HasPrefix(c.Path, "/") || strings.HasSuffix(c.Path, "/")):
		return fmt.Errorf("console: Config.Path %q must start and not end with /", c.Path)
	case c.SessionTTL < 0:
		return fmt.Errorf("console: Config.SessionTTL is %v, want 0 (the default) or more", c.SessionTTL)
	case c.SignInLimit != SignInLimit{} && (c.SignInLimit.PerSecond <= 0 || c.SignInLimit.Burst <= 0):
		return fmt.Errorf("console: Config.SignInLimit %+v: want a positive rate and burst, or the zero value for the default", c.SignInLimit)
	}
	return nil
}

// Console is the operator console.
type Console struct {
	pool       *pgxpool.Pool
	resolve    func(ctx context.Context, presented string) (apikey.Key, error)
	live       func(ctx context.Context, tenant, keyID string) error
	path       string
	sessionTTL time.Duration
	log        *slog.Logger
	sessions   websession.Signer
	pages      *pages
	changed    func(ctx context.Context, rec token.Record)
	// keys and secretOverlap rotate webhook secrets.
	keys          *token.Keyring
	secretOverlap time.Duration
	allow         func(ctx context.Context, keyID string) (bool, time.Duration)
	// signins is the sign-in limit, one bucket per client address.
	signins *keyrate.Limiter
	now     func() time.Time
}

// New returns the console configured by cfg.
func New(cfg Config) (*Console, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Console{
		pool:       cfg.Pool,
		resolve:    cfg.Resolve,
		live:       cfg.Live,
		path:       cmp.Or(cfg.Path, DefaultPath),
		sessionTTL: cmp.Or(cfg.SessionTTL, DefaultSessionTTL),
		log:        cmp.Or(cfg.Logger, slog.Default()),
		changed:    cfg.Changed,
		sessions:   websession.NewSigner(cfg.SecretKey, "tokend console session v1"),
	}
	if c.resolve == nil {
		c.resolve = func(ctx context.Context, presented string) (apikey.Key, error) {
			return apikey.Resolve(ctx, cfg.Pool, presented)
		}
	}
	if c.live == nil {
		c.live = func(ctx context.Context, tenant, keyID string) error {
			return apikey.Live(ctx, cfg.Pool, tenant, keyID)
		}
	}
	var err error
	// Rotation derives an endpoint's new secret from the current server
	// key only, as dispatch does.
	if c.keys, err = token.NewKeyring(cfg.SecretKey); err != nil {
		return nil, err
	}
	c.secretOverlap = cfg.SecretOverlap
	c.allow = cfg.Allow
	lim := cmp.Or(cfg.SignInLimit, DefaultSignInLimit)
	c.signins = keyrate.New(lim.PerSecond, lim.Burst)
	if c.now = cfg.Now; c.now == nil {
		c.now = time.Now
	}
	if c.pages, err = newPages(c.path, c.log); err != nil {
		return nil, err
	}
	return c, nil
}

// Mount registers the console's routes on r, under Config.Path.
func (c *Console) Mount(r gin.IRouter) {
	g := r.Group(c.path, secureHeaders...)
	g.GET("", c.home)
	g.GET("/", c.home)
	g.GET("/signin", c.signinPage)
	g.POST("/signin", c.signin)
	g.StaticFS("/static", staticFS)

	op := g.Group("", c.requireOperator)
	op.POST("/signout", c.checkCSRF, c.signout)
	op.GET("/tokens", c.list)
	op.GET("/tokens/:id", c.show)
	op.GET("/tokens/:id/revoke", c.revokePage)
	op.POST("/tokens/:id/revoke", c.checkCSRF, c.revoke)
	op.GET("/tokens/:id/reconcile", c.reconcilePage)
	op.POST("/tokens/:id/reconcile", c.checkCSRF, c.reconcile)
	op.GET("/webhooks", c.webhooks)
	op.GET("/webhooks/:id", c.webhook)
	op.POST("/webhooks/:id/enable", c.checkCSRF, c.enableWebhook)
	op.POST("/webhooks/:id/disable", c.checkCSRF, c.disableWebhook)
	op.POST("/webhooks/:id/redeliver", c.checkCSRF, c.redeliver)
	op.POST("/webhooks/:id/rotate-secret", c.checkCSRF, c.rotateSecret)
}

// Link is one entry of the index page: where, what it is called, and a line
// on what it is.
type Link struct {
	Path, Name, About string
}

// MountIndex answers GET / on r with a page that links to the console and to
// each of links, so that a browser pointed at the server finds what it
// serves.
func (c *Console) MountIndex(r gin.IRouter, links ...Link) {
	all := append([]Link{{Path: c.path, Name: "Operator console", About: "Sign in with an operator API key to inspect, revoke and reconcile tokens and to look after webhooks."}}, links...)
	r.GET("/", slices.Concat(secureHeaders, []gin.HandlerFunc{func(g *gin.Context) {
		c.pages.render(g.Writer, http.StatusOK, "index.html", nil, all)
	}})...)
}
