import dev.lakesession.jvm.CometCredentialProvider;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.comet.cloud.s3.CometS3AccessMode;
import org.apache.comet.cloud.s3.CometS3CredentialContext;
import org.apache.comet.cloud.s3.CometS3Credentials;

/** Drives lakesession's Comet provider as Comet does (tests/test_comet_provider.py); prints one line per fact. */
public final class ProviderHarness {
  public static void main(String[] args) throws Exception {
    String gateway = args[0], secret = args[1], bucket = args[2], key = args[3], denied = args[4];
    Map<String, String> props = new HashMap<>();
    props.put("uri", gateway + "/some/catalog/path");
    props.put("token", secret);
    props.put("lakesession.min-valid-seconds", "40");
    CometCredentialProvider p = new CometCredentialProvider();
    p.initialize(props);
    System.out.println("policy " + p.getPolicyLocations(bucket));
    ExecutorService pool = Executors.newFixedThreadPool(8);
    List<Future<CometS3Credentials>> all = new ArrayList<>();
    CometS3CredentialContext ctx = new CometS3CredentialContext(bucket, key, CometS3AccessMode.READ);
    for (int i = 0; i < 8; i++) {
      all.add(pool.submit(() -> p.getCredentialsForPath(ctx)));
    }
    java.util.Set<String> keys = new java.util.TreeSet<>();
    long minLeft = Long.MAX_VALUE;
    for (Future<CometS3Credentials> f : all) {
      CometS3Credentials c = f.get();
      keys.add(c.getAccessKeyId());
      minLeft = Math.min(minLeft, c.getExpirationEpochMillis() - System.currentTimeMillis());
    }
    pool.shutdown();
    System.out.println("keys " + keys.size() + " " + String.join(",", keys));
    System.out.println("minleft " + minLeft / 1000);
    System.out.println("gatewaycalls " + CometCredentialProvider.gatewayCalls());
    System.out.println("providercalls " + CometCredentialProvider.providerCalls());
    System.out.println("tostring " + p);
    try {
      p.getCredentialsForPath(new CometS3CredentialContext(bucket, denied, CometS3AccessMode.READ));
      System.out.println("denied no");
    } catch (Exception e) {
      System.out.println("denied " + e.getMessage());
    }
    CometCredentialProvider wrong = new CometCredentialProvider();
    props.put("token", "not-the-session-secret");
    wrong.initialize(props);
    try {
      wrong.getCredentialsForPath(ctx);
      System.out.println("wrongsecret no");
    } catch (Exception e) {
      System.out.println("wrongsecret " + e.getMessage());
    }
    p.close();
    wrong.close();
    try {
      p.getCredentialsForPath(ctx);
      System.out.println("closed no");
    } catch (Exception e) {
      System.out.println("closed " + e.getMessage());
    }
  }
}
