package httpapi

import "github.com/gin-gonic/gin"

// EngineRoutes returns every route s serves, built in or mounted, so that a
// test can walk them all, including routes added after it was written.
func (s *Server) EngineRoutes() gin.RoutesInfo { return s.engine.Routes() }
