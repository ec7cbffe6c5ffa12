package demo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/form"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/internal/serve/keyrate"
	"github.com/tokend/tokend/internal/serve/websession"
	"github.com/tokend/tokend/token"
)

// Defaults of Config.
const (
	DefaultTenant = "demo"
	DefaultPath   = "/demo"
)

// Config configures the demo app.
type Config struct {
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// Issuer issues the form tokens. Required.
	Issuer *intent.Issuer
	// Spender spends them; it must have the ledger's handlers. Required.
	Spender *consume.Spender
	// SecretKey is the server key (TOKEND_SECRET_KEY); the key that signs the
	// session cookie is derived from it. Required.
	SecretKey string
	// Tenant owns the demo's tokens and ledger accounts. Default DefaultTenant.
	Tenant string
	// Path is where the app is mounted. Default DefaultPath.
	Path string
	// TTL is how long a rendered form can be submitted. Default form.DefaultTTL.
	TTL time.Duration
	// Logger receives the errors that pages do not show. Default slog.Default().
	Logger *slog.Logger
	// VisitorLimit bounds the requests of each signed-in visitor, IPLimit
	// those of each client address; over either, a page is answered 429.
	// Zero means DefaultVisitorLimit and DefaultIPLimit.
	VisitorLimit, IPLimit RateLimit
	// Changed is form.Config.Changed for the top-up form: told of every
	// token a submit moved, so the server's cache drops its copy.
	Changed func(ctx context.Context, tenant string, resp consume.Response)
}

// Validate reports whether c is usable.
func (c Config) Validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("demo: Config.Pool is required")
	case c.Issuer == nil:
		return errors.New("demo: Config.Issuer is required")
	case c.Spender == nil:
		return errors.New("demo: Config.Spender is required")
	case len(c.SecretKey) < token.MinKeyLen:
		return fmt.Errorf("demo: Config.SecretKey must be at least %d bytes", token.MinKeyLen)
	case c.Path != "" && (!strings.HasPrefix(c.Path, "/") || strings.HasSuffix(c.Path, "/")):
		return fmt.Errorf("demo: Config.Path %q must start and not end with /", c.Path)
	case !c.VisitorLimit.valid() || !c.IPLimit.valid():
		return errors.New("demo: Config.VisitorLimit and Config.IPLimit need a positive rate and burst, or neither")
	}
	return nil
}

// App is the demo app.
type App struct {
	pool     *pgxpool.Pool
	tenant   string
	path     string
	log      *slog.Logger
	sessions websession.Signer
	topup    *form.Protector
	pages    *pages

	perVisitor, perIP *keyrate.Limiter
}

// New returns the demo app configured by cfg.
func New(cfg Config) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &App{
		pool:       cfg.Pool,
		tenant:     cmp.Or(cfg.Tenant, DefaultTenant),
		path:       cmp.Or(cfg.Path, DefaultPath),
		log:        cmp.Or(cfg.Logger, slog.Default()),
		sessions:   websession.NewSigner(cfg.SecretKey, "tokend demo session v1"),
		perVisitor: cmp.Or(cfg.VisitorLimit, DefaultVisitorLimit).limiter(),
		perIP:      cmp.Or(cfg.IPLimit, DefaultIPLimit).limiter(),
	}
	var err error
	a.topup, err = form.New(form.Config{
		Pool: cfg.Pool, Issuer: cfg.Issuer, Spender: cfg.Spender,
		Tenant: a.tenant, Operation: ledger.Credit, TTL: cfg.TTL,
		Payload: creditPayload, Changed: cfg.Changed,
	})
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	if a.pages, err = newPages(a); err != nil {
		return nil, err
	}
	return a, nil
}

// Mount registers the app's routes on r, under Config.Path.
func (a *App) Mount(r gin.IRouter) {
	g := r.Group(a.path, secureHeaders...)
	g.StaticFS("/static", staticFS)
	g = g.Group("", a.limit)
	g.GET("", a.home)
	g.GET("/", a.home)
	g.GET("/signin", a.signinPage)
	g.POST("/signin", a.signin)
	g.POST("/signout", a.signout)
	topup := a.topup.GinHandler(a.pages, func(c *gin.Context) string { return userOf(c.Request) })
	g.GET("/topup", a.requireUser, topup)
	// Sent to another URL than the page's: a POST makes the browser drop
	// its copy of the URL it was sent to, and Back would then fetch a new
	// rendering of the form instead of restoring the one sent.
	g.POST("/topup/send", a.requireUser, a.ownAccount, topup)
}
