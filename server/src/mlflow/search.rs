//! MLflow's run and experiment search: its filter grammar (`metrics.loss
//! < 0.5 AND params.optimizer = 'adam' AND tags."team" LIKE 'vis%' AND
//! attributes.status = 'FINISHED'`; for experiments `name LIKE 'sweep%'
//! AND tags.team = 'vision'`) and its `order_by` (`metrics.loss DESC`,
//! `attributes.start_time`, `name`), judged on what was already read.

use super::MlflowRun;
use super::experiments::Experiment;
use std::cmp::Ordering;

/// What is searched: the entities and attributes a filter may name differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Runs,
    Experiments,
}

/// A thing a filter judges and an order sorts.
pub trait Searched {
    fn value(&self, field: &Field) -> Option<Found>;
    /// The order after the orders asked for (MLflow's own).
    fn tie_break(&self, other: &Self) -> Ordering;
}

/// One comparison of a filter; a filter is all of them (`AND`).
#[derive(Debug, Clone, PartialEq)]
pub struct Clause {
    field: Field,
    op: Op,
    value: Literal,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Field {
    Metric(String),
    Param(String),
    Tag(String),
    Attribute(Attribute),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Attribute {
    RunId,
    RunName,
    Status,
    UserId,
    ArtifactUri,
    StartTime,
    EndTime,
    ExperimentId,
    Name,
    CreationTime,
    LastUpdateTime,
}

impl Attribute {
    fn parse(kind: Kind, name: &str) -> Option<Attribute> {
        Some(match (kind, name) {
            (Kind::Runs, "run_id") => Attribute::RunId,
            (Kind::Runs, "run_name") => Attribute::RunName,
            (Kind::Runs, "status") => Attribute::Status,
            (Kind::Runs, "user_id") => Attribute::UserId,
            (Kind::Runs, "artifact_uri") => Attribute::ArtifactUri,
            (Kind::Runs, "start_time" | "created") => Attribute::StartTime,
            (Kind::Runs, "end_time") => Attribute::EndTime,
            (Kind::Experiments, "experiment_id") => Attribute::ExperimentId,
            (Kind::Experiments, "name") => Attribute::Name,
            (Kind::Experiments, "creation_time") => Attribute::CreationTime,
            (Kind::Experiments, "last_update_time") => Attribute::LastUpdateTime,
            _ => return None,
        })
    }

    fn is_number(self) -> bool {
        matches!(
            self,
            Attribute::StartTime | Attribute::EndTime | Attribute::CreationTime | Attribute::LastUpdateTime
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Like,
    ILike,
    In,
    NotIn,
}

#[derive(Debug, Clone, PartialEq)]
enum Literal {
    Number(f64),
    Text(String),
    List(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Quoted(String),
    Op(&'static str),
    Open,
    Close,
    Comma,
}

fn tokens(text: &str) -> Result<Vec<Token>, String> {
    let mut found = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some(&(at, c)) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '\'' | '"' | '`' => {
                chars.next();
                let mut quoted = String::new();
                loop {
                    match chars.next() {
                        Some((_, end)) if end == c => break,
                        Some((_, inner)) => quoted.push(inner),
                        None => return Err(format!("the quote at {at} is not closed")),
                    }
                }
                found.push(Token::Quoted(quoted));
            }
            '(' | ')' | ',' => {
                chars.next();
                found.push(match c {
                    '(' => Token::Open,
                    ')' => Token::Close,
                    _ => Token::Comma,
                });
            }
            '<' | '>' | '=' | '!' => {
                chars.next();
                let next = chars.peek().map(|&(_, next)| next);
                let op = match (c, next) {
                    ('<', Some('=')) => "<=",
                    ('>', Some('=')) => ">=",
                    ('!', Some('=')) => "!=",
                    ('<', Some('>')) => "!=",
                    ('<', _) => "<",
                    ('>', _) => ">",
                    ('=', _) => "=",
                    _ => return Err(format!("`!` at {at} is not an operator")),
                };
                if op.len() == 2 {
                    chars.next();
                }
                found.push(Token::Op(op));
            }
            _ => {
                let mut word = String::new();
                while let Some(&(_, inner)) = chars.peek() {
                    if inner.is_whitespace() || "'\"`()<>=!,".contains(inner) {
                        break;
                    }
                    word.push(inner);
                    chars.next();
                }
                // `metrics.` followed by a quoted key is one identifier.
                if word.ends_with('.')
                    && let Some(&(_, '"' | '`')) = chars.peek()
                {
                    let quote = chars.next().map(|(_, q)| q).unwrap_or('"');
                    for (_, inner) in chars.by_ref() {
                        if inner == quote {
                            break;
                        }
                        word.push(inner);
                    }
                }
                found.push(Token::Word(word));
            }
        }
    }
    Ok(found)
}

fn field(kind: Kind, identifier: &str) -> Result<Field, String> {
    let attribute = |key: &str| {
        Attribute::parse(kind, key)
            .map(Field::Attribute)
            .ok_or_else(|| match kind {
                Kind::Runs => format!(
                    "`{key}` is not an attribute one can search by: run_id, run_name, status, user_id, \
                 artifact_uri, start_time, end_time"
                ),
                Kind::Experiments => format!(
                    "`{key}` is not an attribute one can search experiments by: name, experiment_id, \
                 creation_time, last_update_time"
                ),
            })
    };
    let Some((entity, key)) = identifier.split_once('.') else {
        // Experiments' attributes go without their entity: `name LIKE 'a%'`.
        return match kind {
            Kind::Experiments => attribute(identifier),
            Kind::Runs => Err(format!(
                "`{identifier}` names no entity: metrics.KEY, params.KEY, tags.KEY or attributes.NAME"
            )),
        };
    };
    if key.is_empty() {
        return Err(format!("`{identifier}` names no key"));
    }
    match (kind, entity.to_ascii_lowercase().as_str()) {
        (Kind::Runs, "metric" | "metrics") => Ok(Field::Metric(key.to_string())),
        (Kind::Runs, "param" | "params" | "parameter" | "parameters") => Ok(Field::Param(key.to_string())),
        (_, "tag" | "tags") => Ok(Field::Tag(key.to_string())),
        (Kind::Runs, "attribute" | "attributes" | "attr" | "run") => attribute(key),
        (Kind::Experiments, "attribute" | "attributes" | "attr" | "experiment") => attribute(key),
        (Kind::Runs, other) => Err(format!(
            "`{other}` is not an entity: metrics, params, tags or attributes"
        )),
        (Kind::Experiments, other) => Err(format!(
            "`{other}` is not an entity of experiments: tags or attributes"
        )),
    }
}

/// A run filter, every comparison in it; an empty one is no filter.
pub fn parse_filter(text: &str) -> Result<Vec<Clause>, String> {
    parse(Kind::Runs, text)
}

/// An experiment filter (`name`, `creation_time`, `last_update_time`, `tags.KEY`).
pub fn parse_experiment_filter(text: &str) -> Result<Vec<Clause>, String> {
    parse(Kind::Experiments, text)
}

fn parse(kind: Kind, text: &str) -> Result<Vec<Clause>, String> {
    let tokens = tokens(text)?;
    let mut clauses = Vec::new();
    let mut rest = tokens.as_slice();
    while !rest.is_empty() {
        let (clause, after) = comparison(kind, rest)?;
        clauses.push(clause);
        rest = match after {
            [] => after,
            [Token::Word(and), tail @ ..] if and.eq_ignore_ascii_case("and") && !tail.is_empty() => tail,
            [next, ..] => return Err(format!("expected AND between comparisons, found {}", shown(next))),
        };
    }
    Ok(clauses)
}

fn shown(token: &Token) -> String {
    match token {
        Token::Word(word) => format!("`{word}`"),
        Token::Quoted(text) => format!("'{text}'"),
        Token::Op(op) => format!("`{op}`"),
        Token::Open => "`(`".into(),
        Token::Close => "`)`".into(),
        Token::Comma => "`,`".into(),
    }
}

fn comparison(kind: Kind, tokens: &[Token]) -> Result<(Clause, &[Token]), String> {
    let Some(Token::Word(identifier)) = tokens.first() else {
        return Err(match tokens.first() {
            Some(token) => format!(
                "expected metrics.KEY, params.KEY, tags.KEY or attributes.NAME, found {}",
                shown(token)
            ),
            None => "the filter ends too early".into(),
        });
    };
    let field = field(kind, identifier)?;
    let word = |n: usize| match tokens.get(n) {
        Some(Token::Word(word)) => Some(word.to_ascii_uppercase()),
        _ => None,
    };
    let (op, used) = match (tokens.get(1), word(1).as_deref(), word(2).as_deref()) {
        (Some(Token::Op(op)), _, _) => (
            match *op {
                "=" => Op::Eq,
                "!=" => Op::Ne,
                "<" => Op::Lt,
                "<=" => Op::Le,
                ">" => Op::Gt,
                _ => Op::Ge,
            },
            2,
        ),
        (_, Some("LIKE"), _) => (Op::Like, 2),
        (_, Some("ILIKE"), _) => (Op::ILike, 2),
        (_, Some("IN"), _) => (Op::In, 2),
        (_, Some("NOT"), Some("IN")) => (Op::NotIn, 3),
        (Some(token), _, _) => {
            return Err(format!(
                "expected a comparison after `{identifier}`, found {}",
                shown(token)
            ));
        }
        (None, _, _) => return Err(format!("`{identifier}` is compared with nothing")),
    };
    let rest = &tokens[used..];
    let (value, rest) = match (op, rest) {
        (Op::In | Op::NotIn, [Token::Open, ..]) => {
            let mut items = Vec::new();
            let mut at = 1;
            loop {
                match (rest.get(at), rest.get(at + 1)) {
                    (Some(Token::Quoted(item)), Some(Token::Comma)) => items.push(item.clone()),
                    (Some(Token::Quoted(item)), Some(Token::Close)) => {
                        items.push(item.clone());
                        break;
                    }
                    _ => {
                        return Err(format!(
                            "`{identifier} IN` takes a list of quoted values: ('a', 'b')"
                        ));
                    }
                }
                at += 2;
            }
            (Literal::List(items), &rest[at + 2..])
        }
        (Op::In | Op::NotIn, _) => {
            return Err(format!(
                "`{identifier} IN` takes a list of quoted values: ('a', 'b')"
            ));
        }
        (_, [Token::Quoted(text), tail @ ..]) => (Literal::Text(text.clone()), tail),
        (_, [Token::Word(number), tail @ ..]) => match number.parse::<f64>() {
            Ok(number) => (Literal::Number(number), tail),
            Err(_) => return Err(format!("`{number}` is neither a number nor a quoted string")),
        },
        (_, [token, ..]) => {
            return Err(format!(
                "expected a value after `{identifier}`, found {}",
                shown(token)
            ));
        }
        (_, []) => return Err(format!("`{identifier}` is compared with nothing")),
    };
    let clause = Clause { field, op, value };
    check(&clause, identifier)?;
    Ok((clause, rest))
}

/// The operators and values each kind of field takes, as MLflow allows.
fn check(clause: &Clause, identifier: &str) -> Result<(), String> {
    let numeric = matches!(clause.field, Field::Metric(_))
        || matches!(clause.field, Field::Attribute(attribute) if attribute.is_number());
    let ordering = matches!(clause.op, Op::Lt | Op::Le | Op::Gt | Op::Ge);
    let ok = match (&clause.field, clause.op, &clause.value) {
        (_, Op::In | Op::NotIn, _) => matches!(clause.field, Field::Attribute(Attribute::RunId)),
        _ if numeric => {
            matches!(clause.value, Literal::Number(_)) && !matches!(clause.op, Op::Like | Op::ILike)
        }
        (_, _, Literal::Text(_)) => !ordering,
        _ => false,
    };
    if ok {
        Ok(())
    } else if numeric {
        Err(format!(
            "`{identifier}` compares with a number, by =, !=, <, <=, > or >="
        ))
    } else if matches!(clause.op, Op::In | Op::NotIn) {
        Err(format!(
            "only attributes.run_id takes IN and NOT IN, not `{identifier}`"
        ))
    } else {
        Err(format!(
            "`{identifier}` compares with a quoted string, by =, !=, LIKE or ILIKE"
        ))
    }
}

/// A field's value in a run or experiment: a number or text, or nothing.
pub enum Found {
    Number(f64),
    Text(String),
}

impl Searched for MlflowRun {
    fn value(&self, field: &Field) -> Option<Found> {
        run_value(self, field)
    }

    /// Newest first, then by id.
    fn tie_break(&self, other: &MlflowRun) -> Ordering {
        other
            .start_time
            .cmp(&self.start_time)
            .then_with(|| self.run.id.cmp(&other.run.id))
    }
}

impl Searched for Experiment {
    fn value(&self, field: &Field) -> Option<Found> {
        match field {
            Field::Tag(key) => self.tags.get(key).map(|value| Found::Text(value.clone())),
            Field::Attribute(Attribute::Name) => Some(Found::Text(self.name.clone())),
            Field::Attribute(Attribute::ExperimentId) => Some(Found::Text(self.id.to_string())),
            Field::Attribute(Attribute::CreationTime) => Some(Found::Number(self.created_at as f64)),
            Field::Attribute(Attribute::LastUpdateTime) => Some(Found::Number(self.updated_at as f64)),
            _ => None,
        }
    }

    /// Newest first, then by id (MLflow's `creation_time DESC, experiment_id`).
    fn tie_break(&self, other: &Experiment) -> Ordering {
        other
            .created_at
            .cmp(&self.created_at)
            .then_with(|| self.id.to_string().cmp(&other.id.to_string()))
    }
}

fn run_value(run: &MlflowRun, field: &Field) -> Option<Found> {
    match field {
        Field::Metric(key) => run
            .run
            .latest
            .get(key)
            .map(|latest| Found::Number(latest.value.0)),
        Field::Param(key) => run.run.config.get(key).map(|value| {
            Found::Text(
                value
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| value.to_string()),
            )
        }),
        Field::Tag(key) => run.tags.get(key).map(|value| Found::Text(value.clone())),
        Field::Attribute(attribute) => match attribute {
            Attribute::RunId => Some(Found::Text(run.run.id.clone())),
            Attribute::RunName => Some(Found::Text(run.run.name.clone())),
            Attribute::Status => Some(Found::Text(run.status.clone())),
            Attribute::UserId => Some(Found::Text(run.user.clone().unwrap_or_default())),
            Attribute::ArtifactUri => Some(Found::Text(run.artifact_uri())),
            Attribute::StartTime => Some(Found::Number(run.start_time as f64)),
            Attribute::EndTime => run.end_time.map(|end| Found::Number(end as f64)),
            Attribute::ExperimentId
            | Attribute::Name
            | Attribute::CreationTime
            | Attribute::LastUpdateTime => None,
        },
    }
}

/// Whether a run or experiment passes every clause (one without the field fails it).
pub fn matches(searched: &impl Searched, clauses: &[Clause]) -> bool {
    clauses.iter().all(|clause| {
        let Some(found) = searched.value(&clause.field) else {
            return false;
        };
        match (found, &clause.value) {
            (Found::Number(have), Literal::Number(want)) => match clause.op {
                Op::Eq => have == *want,
                Op::Ne => have != *want,
                Op::Lt => have < *want,
                Op::Le => have <= *want,
                Op::Gt => have > *want,
                Op::Ge => have >= *want,
                _ => false,
            },
            (Found::Text(have), Literal::Text(want)) => match clause.op {
                Op::Eq => have == *want,
                Op::Ne => have != *want,
                Op::Like => like(&have, want),
                Op::ILike => like(&have.to_lowercase(), &want.to_lowercase()),
                _ => false,
            },
            (Found::Text(have), Literal::List(items)) => match clause.op {
                Op::In => items.contains(&have),
                Op::NotIn => !items.contains(&have),
                _ => false,
            },
            _ => false,
        }
    })
}

/// SQL's LIKE: `%` any run of characters, `_` any one.
fn like(text: &str, pattern: &str) -> bool {
    let text: Vec<char> = text.chars().collect();
    let pattern: Vec<char> = pattern.chars().collect();
    // matched[j]: the text so far matches pattern[..j].
    let mut matched = vec![false; pattern.len() + 1];
    matched[0] = true;
    for j in 1..=pattern.len() {
        matched[j] = matched[j - 1] && pattern[j - 1] == '%';
    }
    for c in text {
        let mut next = vec![false; pattern.len() + 1];
        for j in 1..=pattern.len() {
            next[j] = match pattern[j - 1] {
                '%' => next[j - 1] || matched[j],
                '_' => matched[j - 1],
                p => matched[j - 1] && p == c,
            };
        }
        matched = next;
    }
    matched[pattern.len()]
}

/// One `order_by` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Order {
    field: Field,
    descending: bool,
}

/// `metrics.loss`, `metrics.loss DESC`, `attributes.start_time ASC` (for
/// experiments: `name`, `creation_time DESC`…).
pub fn parse_order(kind: Kind, text: &str) -> Result<Order, String> {
    let words = tokens(text)?;
    let (identifier, direction) = match words.as_slice() {
        [Token::Word(identifier)] => (identifier, None),
        [Token::Word(identifier), Token::Word(direction)] => {
            (identifier, Some(direction.to_ascii_uppercase()))
        }
        _ => return Err(format!("`{text}` is not KEY [ASC|DESC]")),
    };
    let descending = match direction.as_deref() {
        None | Some("ASC") => false,
        Some("DESC") => true,
        Some(other) => return Err(format!("`{other}` is neither ASC nor DESC")),
    };
    let field = field(kind, identifier)?;
    if kind == Kind::Experiments && !matches!(field, Field::Attribute(_)) {
        return Err(format!(
            "experiments are ordered by attributes only, not `{identifier}`"
        ));
    }
    Ok(Order { field, descending })
}

/// Sorts by the orders given, then as MLflow does ([`Searched::tie_break`]);
/// those without a value sort last either way.
pub fn sort<T: Searched>(found: &mut [T], orders: &[Order]) {
    found.sort_by(|a, b| {
        for order in orders {
            let ordering = match (a.value(&order.field), b.value(&order.field)) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Greater,
                (Some(_), None) => Ordering::Less,
                (Some(left), Some(right)) => {
                    let ordering = match (left, right) {
                        (Found::Number(left), Found::Number(right)) => left.total_cmp(&right),
                        (Found::Text(left), Found::Text(right)) => left.cmp(&right),
                        (Found::Number(_), Found::Text(_)) => Ordering::Less,
                        (Found::Text(_), Found::Number(_)) => Ordering::Greater,
                    };
                    if order.descending {
                        ordering.reverse()
                    } else {
                        ordering
                    }
                }
            };
            if ordering != Ordering::Equal {
                return ordering;
            }
        }
        a.tie_break(b)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_parse_as_mlflow_writes_them() {
        let clauses = parse_filter(
            "metrics.loss < 0.5 and params.optimizer = 'adam' AND tags.\"my team\" LIKE 'vis%' \
             AND attributes.status != \"FAILED\" AND attributes.run_id IN ('a', 'b') AND metrics.`val loss` >= -1e-3",
        )
        .unwrap();
        assert_eq!(clauses.len(), 6);
        assert_eq!(clauses[2].field, Field::Tag("my team".into()));
        assert_eq!(clauses[5].field, Field::Metric("val loss".into()));
        assert_eq!(clauses[5].value, Literal::Number(-1e-3));
        assert_eq!(clauses[4].value, Literal::List(vec!["a".into(), "b".into()]));
        assert!(parse_filter("").unwrap().is_empty());
    }

    #[test]
    fn bad_filters_say_what_is_wrong() {
        for (filter, said) in [
            ("loss < 1", "names no entity"),
            ("metrics.loss < 'low'", "compares with a number"),
            ("params.lr > '0.1'", "compares with a quoted string"),
            ("metrics.loss < 1 metrics.acc > 0", "expected AND"),
            ("tags.team IN ('a')", "only attributes.run_id takes IN"),
            ("metrics.loss <", "compared with nothing"),
            ("params.lr = 'open", "not closed"),
            ("things.x = '1'", "is not an entity"),
            ("attributes.colour = 'red'", "is not an attribute"),
            ("metrics.loss < 1 AND", "expected AND"),
        ] {
            let error = parse_filter(filter).unwrap_err();
            assert!(error.contains(said), "{filter}: {error}");
        }
    }

    #[test]
    fn like_is_sqls() {
        assert!(like("vision", "vis%"));
        assert!(like("vision", "%sio_"));
        assert!(like("", "%"));
        assert!(!like("vision", "vis"));
        assert!(!like("vis", "vis_"));
        assert!(like("a%b", "a%b"));
    }

    #[test]
    fn orders_parse() {
        assert_eq!(
            parse_order(Kind::Runs, "metrics.loss DESC").unwrap(),
            Order {
                field: Field::Metric("loss".into()),
                descending: true
            }
        );
        assert!(
            !parse_order(Kind::Runs, "attributes.start_time")
                .unwrap()
                .descending
        );
        assert!(parse_order(Kind::Runs, "metrics.loss SIDEWAYS").is_err());
        assert!(parse_order(Kind::Experiments, "name DESC").unwrap().descending);
        assert!(parse_order(Kind::Experiments, "tags.team").is_err());
        assert!(parse_order(Kind::Runs, "name").is_err());
    }

    #[test]
    fn experiment_filters_take_bare_attributes_and_tags() {
        let clauses = parse_experiment_filter(
            "name LIKE 'sweep%' AND tags.team = 'vision' AND attribute.creation_time > 5",
        )
        .unwrap();
        assert_eq!(clauses[0].field, Field::Attribute(Attribute::Name));
        assert_eq!(clauses[1].field, Field::Tag("team".into()));
        assert_eq!(clauses[2].value, Literal::Number(5.0));
        for (filter, said) in [
            ("metrics.loss < 1", "not an entity of experiments"),
            ("status = 'x'", "not an attribute one can search experiments by"),
            ("creation_time = 'today'", "compares with a number"),
        ] {
            let error = parse_experiment_filter(filter).unwrap_err();
            assert!(error.contains(said), "{filter}: {error}");
        }
    }
}
