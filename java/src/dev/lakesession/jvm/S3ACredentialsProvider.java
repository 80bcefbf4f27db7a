package dev.lakesession.jvm;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.time.Instant;
import org.apache.hadoop.conf.Configuration;
import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.AwsCredentials;
import software.amazon.awssdk.auth.credentials.AwsCredentialsProvider;
import software.amazon.awssdk.auth.credentials.AwsSessionCredentials;

/**
 * AWS SDK v2 provider for Hadoop S3A ({@code fs.s3a.aws.credentials.provider}, Hadoop 3.4): the bucket's
 * key as {@link S3AKeys} picks it; every request naming an object gets the key of its prefix, and writes
 * the write union's, per request ({@link GrantCheckInterceptor}).
 */
public final class S3ACredentialsProvider implements AwsCredentialsProvider, AutoCloseable {
  private final S3AKeys keys;

  public S3ACredentialsProvider(URI uri, Configuration conf) {
    this(uri.getHost(), conf, S3AKeys.mode(conf));
  }

  S3ACredentialsProvider(String bucket, Configuration conf, String mode) {
    this.keys = new S3AKeys(bucket, conf, mode);
  }

  static AwsCredentials toSdk(Creds c) {
    if (c.sessionToken == null) {
      return AwsBasicCredentials.create(c.accessKeyId, c.secretAccessKey);
    }
    return AwsSessionCredentials.builder()
        .accessKeyId(c.accessKeyId)
        .secretAccessKey(c.secretAccessKey)
        .sessionToken(c.sessionToken)
        .expirationTime(Instant.ofEpochMilli(c.expiresAtMs))
        .build();
  }

  @Override
  public AwsCredentials resolveCredentials() {
    try {
      return toSdk(keys.current());
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  @Override
  public void close() {
    // the caches outlive one S3A filesystem: the session's other filesystems share them
  }

  @Override
  public String toString() {
    return "lakesession S3ACredentialsProvider{" + keys + "}";
  }
}
