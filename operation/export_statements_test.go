package operation

// Statements are the package's statements, for the test that runs each.
var Statements = map[string]string{"get": getSQL, "list": listSQL, "put": putSQL, "lock": lockSQL, "delete": deleteSQL}
