-- Outcome bodies were stored as json.Marshal writes them, with <, > and &
-- escaped as \u003c, \u003e and \u0026: up to six times their size, in the
-- token, in each event that carries the body, in every replay and page of
-- the feed. They are now stored as they are (consume.OutcomeBody.Encode);
-- this rewrites the bodies already stored the same way. The JSON value is
-- unchanged: an escape is replaced only where its backslash is not itself
-- escaped (an even run of backslashes before it).
UPDATE tokens
SET result_body = convert_to(
        regexp_replace(regexp_replace(regexp_replace(convert_from(result_body, 'UTF8'),
            '(?<!\\)((?:\\\\)*)\\u003c', '\1<', 'g'),
            '(?<!\\)((?:\\\\)*)\\u003e', '\1>', 'g'),
            '(?<!\\)((?:\\\\)*)\\u0026', '\1&', 'g'),
        'UTF8')
WHERE strpos(convert_from(result_body, 'UTF8'), '\u00') > 0;

UPDATE token_events
SET outcome_body = convert_to(
        regexp_replace(regexp_replace(regexp_replace(convert_from(outcome_body, 'UTF8'),
            '(?<!\\)((?:\\\\)*)\\u003c', '\1<', 'g'),
            '(?<!\\)((?:\\\\)*)\\u003e', '\1>', 'g'),
            '(?<!\\)((?:\\\\)*)\\u0026', '\1&', 'g'),
        'UTF8')
WHERE strpos(convert_from(outcome_body, 'UTF8'), '\u00') > 0;
