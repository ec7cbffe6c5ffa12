package httpapi

import (
	"html/template"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/openapi"
)

// problemTypePrefix makes a problem's type a URI of this server: the page
// of its code, which says what happened and what the caller may do next.
const problemTypePrefix = "/problems/"

func (s *Server) openAPI(c *gin.Context) {
	b, err := openapi.JSON()
	if err != nil {
		Abort(c, err)
		return
	}
	c.Data(http.StatusOK, "application/json", b)
}

var problemPage = template.Must(template.New("problem").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}} ({{.Code}})</title></head>
<body>
<h1>{{.Title}}</h1>
<p>HTTP {{.Status}}, code <code>{{.Code}}</code>.</p>
<h2>What happened</h2>
<p>{{.Happened}}</p>
<h2>What to do next</h2>
<p>{{.Next}}</p>
<p>The API is described in <a href="/openapi.json">/openapi.json</a>.</p>
</body></html>
`))

func (s *Server) problemPage(c *gin.Context) {
	problems, err := openapi.Problems()
	if err != nil {
		Abort(c, err)
		return
	}
	p, ok := problems[c.Param("code")]
	if !ok {
		Abort(c, &Problem{Status: http.StatusNotFound, Code: "not_found", Title: "Not found", Detail: "no such problem code"})
		return
	}
	c.Status(http.StatusOK)
	c.Header("Content-Type", "text/html; charset=utf-8")
	if err := problemPage.Execute(c.Writer, p); err != nil {
		_ = c.Error(err)
	}
}
