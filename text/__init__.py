"""Reading text: the one home for how Loreguard reads what players and models write.

- `words`      words, the one stemmer, keywords (on `loreguard.schemas.text`'s normal forms)
- `negation`   the one list of negations, and the words that deny
- `questions`  the one question detector (six languages)
- `clauses`    clauses, subjects and what a clause denies or vouches for
- `numbers`    number words and the numbers a line says
- `phrases`    phrase matching, sentences, dialogue cleaning
- `asking`     whether a line asks for an act (request mood)
- `request_terms`  a request worded in terms a rule forbids
- `money`      the money a line names, and money said as a person says it
- `stock_talk` whether a line says a trader has none of a ware

The gate's checks, memory's claim reading and request reading all import from here, one rung
above the schemas and below memory, so a new check's author finds the one list to use. Pure and
deterministic: text in, words and decisions out.
"""
