//! Connection URLs, read here for every backend with the `url` crate. A server's URL
//! (`postgres://…`, `redis://…`) is a URL to the standard; a cluster's URL naming several hosts
//! (`redis+cluster://a:7000,b:7001`) is not, so its hosts are split first and each is read as
//! one; a file's location (`sqlite://./x.db`, `file:x.db`) is a path, read by its backend.

/// Takes the query parameter `name` out of a URL, for settings of ours that the driver would
/// refuse (`?schema=` for PostgreSQL, `?prefix=` for Redis): returns the URL without it and
/// its value, percent-decoded (the last one when repeated). The other parameters are kept byte
/// for byte, for the driver to read as it reads them.
///
/// ```
/// use mnemix_core::url::take_query_param;
/// assert_eq!(
///     take_query_param("redis://h:6379/?prefix=my%20app&protocol=resp3", "prefix"),
///     ("redis://h:6379/?protocol=resp3".to_owned(), Some("my app".to_owned()))
/// );
/// assert_eq!(take_query_param("postgres://h/db", "schema"), ("postgres://h/db".to_owned(), None));
/// ```
pub fn take_query_param(url: &str, name: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), None);
    };
    let mut value = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(
            |pair| match ::url::form_urlencoded::parse(pair.as_bytes()).next() {
                Some((key, found)) if key == name => {
                    value = Some(found.into_owned());
                    false
                }
                _ => true,
            },
        )
        .collect();
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (url, value)
}

/// The URL with any password replaced by `***`, for messages and `Debug` output. Each host of
/// a cluster's URL is redacted; text that is not a URL is returned as it is.
///
/// ```
/// use mnemix_core::url::redacted;
/// assert_eq!(redacted("postgres://me:secret@db/app"), "postgres://me:***@db/app");
/// assert_eq!(redacted("redis://:secret@cache:6379"), "redis://:***@cache:6379");
/// assert_eq!(redacted("redis://cache:6379"), "redis://cache:6379");
/// assert_eq!(
///     redacted("redis+cluster://:pw@a:7000,:pw@b:7001"),
///     "redis+cluster://:***@a:7000,:***@b:7001"
/// );
/// ```
pub fn redacted(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, hosts)) if hosts.contains(',') => {
            let hosts: Vec<String> = hosts
                .split(',')
                .map(|host| {
                    let one = redacted_one(&format!("{scheme}://{}", host.trim()));
                    one[scheme.len() + 3..].to_owned()
                })
                .collect();
            format!("{scheme}://{}", hosts.join(","))
        }
        _ => redacted_one(url),
    }
}

fn redacted_one(url: &str) -> String {
    match ::url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => match parsed.set_password(Some("***")) {
            Ok(()) => parsed.into(),
            // A URL whose password cannot be replaced is not shown at all.
            Err(()) => format!("{}://***", parsed.scheme()),
        },
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::{redacted, take_query_param};

    #[test]
    fn only_the_named_parameter_goes() {
        let (url, schema) =
            take_query_param("postgres://u@h/db?schema=mem&sslmode=disable", "schema");
        assert_eq!(url, "postgres://u@h/db?sslmode=disable");
        assert_eq!(schema.as_deref(), Some("mem"));
        assert_eq!(
            take_query_param("redis://h/?prefixes=x", "prefix"),
            ("redis://h/?prefixes=x".to_owned(), None),
            "a longer name is another parameter"
        );
        assert_eq!(
            take_query_param("redis://h/?prefix=a", "prefix"),
            ("redis://h/".to_owned(), Some("a".to_owned()))
        );
        // Others' encoding is the driver's to read: kept byte for byte.
        assert_eq!(
            take_query_param("postgres://h/db?application_name=a%20b&schema=s", "schema"),
            (
                "postgres://h/db?application_name=a%20b".to_owned(),
                Some("s".to_owned())
            )
        );
    }

    #[test]
    fn passwords_never_show() {
        // An encoded password is still a password.
        assert_eq!(
            redacted("postgres://me:p%40ss@db:5432/app?sslmode=disable"),
            "postgres://me:***@db:5432/app?sslmode=disable"
        );
        assert_eq!(
            redacted("rediss://user:pw@cache"),
            "rediss://user:***@cache"
        );
        // No password, or not a URL at all: unchanged.
        assert_eq!(redacted("postgres://me@db/app"), "postgres://me@db/app");
        assert_eq!(redacted("sqlite://./memory.db"), "sqlite://./memory.db");
        assert_eq!(redacted("host=db user=me"), "host=db user=me");
    }
}
