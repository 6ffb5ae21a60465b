//! Finding the master the Sentinels name: every Sentinel asked at once, the master a majority
//! names taken.

use super::*;

impl Conn {
    /// Asks every Sentinel at once where the master is, and takes the master a majority of
    /// them names — or, when some cannot be asked, the one every Sentinel that answered names.
    /// So no single Sentinel decides: not one listed first that is stale, slow, or watches
    /// another deployment's master of the same name. A Sentinel that still names the master
    /// the latest switch replaced has not caught up and does not count. Sentinels that name
    /// different masters with no majority are a failover in progress (retried, never run
    /// without the lock). A Sentinel that answers in a way no retry changes (it is no
    /// Sentinel, does not know the master, refuses the credentials, TLS cannot work) is a
    /// mistake, reported when no Sentinel names the master, and warned about when one does.
    pub(super) async fn discover(
        &self,
        sentinels: &[Node],
        master: &str,
        demoted: Option<&(String, u16)>,
    ) -> Result<(String, u16), Fault> {
        use futures_util::stream::{FuturesUnordered, StreamExt};

        let limit = self.connect_timeout + self.command_timeout;
        let majority = sentinels.len() / 2 + 1;
        let mut asks: FuturesUnordered<_> = sentinels
            .iter()
            .map(|sentinel| async move {
                let asked = async {
                    let mut conn =
                        sentinel.client.get_multiplexed_async_connection_with_config(&self.config).await?;
                    redis::cmd("SENTINEL")
                        .arg("get-master-addr-by-name")
                        .arg(master)
                        .query_async::<Option<(String, u16)>>(&mut conn)
                        .await
                };
                (sentinel, tokio::time::timeout(limit, asked).await)
            })
            .collect();
        // Who named what, in the order the answers came.
        let mut named: Vec<((String, u16), &str)> = Vec::new();
        let mut mistake: Option<Fault> = None;
        let mut answered: Option<Fault> = None;
        let mut local: Option<Fault> = None;
        let mut last = String::from("no Sentinel answered");
        while let Some((sentinel, outcome)) = asks.next().await {
            let shown = sentinel.shown.as_str();
            match outcome {
                Ok(Ok(Some(addr))) if demoted == Some(&addr) => {
                    answered = Some(Fault::Transient(format!(
                        "Sentinel {shown} still names {}:{}, the master a failover replaced",
                        addr.0, addr.1
                    )));
                }
                Ok(Ok(Some(addr))) => {
                    named.push((addr, shown));
                    let addr = &named[named.len() - 1].0;
                    if named.iter().filter(|(a, _)| a == addr).count() >= majority {
                        break;
                    }
                }
                Ok(Ok(None)) => {
                    let unknown = format!(
                        "Sentinel {shown} does not know a master named {master:?}: check --sentinel-master"
                    );
                    // A configuration mistake (78) explains more than a refusal (77).
                    if !matches!(mistake, Some(Fault::Config(_))) {
                        mistake = Some(Fault::Config(unknown));
                    }
                }
                Ok(Err(e)) => match mistakes::sentinel_mistake(sentinel, &e, self.connect_timeout).await {
                    Some(fault) => {
                        if !matches!(mistake, Some(Fault::Config(_))) {
                            mistake = Some(fault);
                        }
                    }
                    None => match Fault::from_redis(&e) {
                        Fault::Unavailable(_) => last = format!("Sentinel {shown}: {e}"),
                        Fault::Internal(text) => local = Some(Fault::Internal(text)),
                        // It answered, with an error: not an outage.
                        _ => answered = Some(Fault::Transient(format!("Sentinel {shown} answered: {e}"))),
                    },
                },
                Err(_) => last = format!("Sentinel {shown} did not answer within {limit:?}"),
            }
        }
        // The rest are not waited for.
        drop(asks);
        if let Some((addr, _)) = named.last() {
            let votes = |a: &(String, u16)| named.iter().filter(|(b, _)| b == a).count();
            if votes(addr) >= majority || named.iter().all(|(a, _)| a == addr) {
                if let Some(fault) = &mistake {
                    tracing::warn!("{fault}");
                }
                return Ok(addr.clone());
            }
            let said: Vec<String> = named.iter().map(|((h, p), s)| format!("{s} names {h}:{p}")).collect();
            return Err(Fault::Transient(format!(
                "the Sentinels disagree about the master {master:?} and no majority names one ({})",
                said.join(", ")
            )));
        }
        // Nobody named the master. A Sentinel's mistake, then a failure here, then a Sentinel
        // that answered explain it better than one that could not be reached.
        Err(mistake.or(local).or(answered).unwrap_or(Fault::Unavailable(last)))
    }
}
